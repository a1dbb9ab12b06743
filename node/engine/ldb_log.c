/*
 * ldb_log.c — leveldb's logs preallocated ahead of its writes, and their
 * zero tails trimmed before an open. See ldb_log.h for why.
 */
#define _GNU_SOURCE /* fallocate */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include "ldb_log.h"
#include "log.h"
#include "sx_errors.h"

/* leveldb's log format (doc/log_format.md): 32 KiB blocks of records, each
 * a 7-byte header (checksum 4, length 2 little-endian, type 1) and its
 * data; fewer than 7 bytes left at a block's end are a zero trailer. */
#define LOG_BLOCK 32768
#define LOG_HEADER 7
#define READ_CHUNK (32 * LOG_BLOCK)
/* Preallocate only on a disk with this many times the size free: a nearly
 * full disk needs its room for compactions. */
#define FREE_FACTOR 16
#define LOCK_NAME "LOCK.shardex"

static bool is_log(const char *name)
{
    size_t n = strlen(name);

    return n > 4 && strcmp(name + n - 4, ".log") == 0;
}

/* Reads exactly n bytes at off into buf: 0, or -1 (errno set; EIO for a
 * file shorter than that). */
static int read_at(int fd, uint8_t *buf, size_t n, off_t off)
{
    size_t got = 0;

    while (got < n) {
        ssize_t r = pread(fd, buf + got, n - got, off + (off_t)got);

        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            if (r == 0)
                errno = EIO;
            return -1;
        }
        got += (size_t)r;
    }
    return 0;
}

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t v = i;

        for (int k = 0; k < 8; k++)
            v = v & 1 ? (v >> 1) ^ 0x82f63b78u : v >> 1;
        crc_table[i] = v;
    }
}

/* CRC-32C (Castagnoli), as leveldb checks its records. */
static uint32_t crc32c(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;

    pthread_once(&crc_once, crc_init);
    while (n--)
        c = crc_table[(c ^ *p++) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

/* Whether the record at off (header h, data length len) has the checksum
 * leveldb gave it (over its type and data, masked). */
static int record_sound(int fd, const uint8_t *h, size_t len, off_t off, bool *sound)
{
    uint8_t buf[1 + LOG_BLOCK];
    uint32_t want = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 |
                    (uint32_t)h[3] << 24,
             got;

    buf[0] = h[6];
    if (len > LOG_BLOCK || read_at(fd, buf + 1, len, off + LOG_HEADER) != 0)
        return -1;
    got = crc32c(buf, 1 + len);
    got = ((got >> 15) | (got << 17)) + 0xa282ead8u;
    *sound = got == want;
    return 0;
}

/* The offset after the file's last non-zero byte (0: all zero). */
static int last_nonzero(int fd, off_t size, off_t *z)
{
    uint8_t *buf = malloc(READ_CHUNK);
    off_t hi = size;

    if (buf == NULL) {
        errno = ENOMEM;
        return SX_ENOMEM;
    }
    *z = 0;
    while (hi > 0) {
        off_t lo = hi > READ_CHUNK ? hi - READ_CHUNK : 0;
        size_t n = (size_t)(hi - lo);

        if (read_at(fd, buf, n, lo) != 0) {
            free(buf);
            return SX_EIO;
        }
        if (buf[0] == 0 && memcmp(buf, buf + 1, n - 1) == 0)
            n = 0; /* a chunk of zeros (the usual tail) */
        while (n > 0 && buf[n - 1] == 0)
            n--;
        if (n > 0) {
            *z = lo + (off_t)n;
            break;
        }
        hi = lo;
    }
    free(buf);
    return 0;
}

/* Where leveldb's last write to log fd ended, into *end (see ldb_log_end),
 * and whether its last record was cut short (*cut; NULL: not asked);
 * SX_EINVAL when that cannot be told (left for leveldb to judge). Writes
 * the zeros after them (preallocated) are told from a record's own zeros
 * by the records' headers: they are walked from the start to the last one
 * before the final run of zeros. That one is whole when its checksum holds
 * (the log ends after it); a record whose checksum fails and whose extent
 * reaches into the final zeros was being written when the writer stopped
 * (the log ends before it, as the file did without preallocation: leveldb
 * drops a record cut short at the end). Anything else (zeros between
 * records and more records, a header running past its block, a bad
 * checksum in a record the zeros do not reach) is not ours to cut. */
static int log_end_fd(int fd, const char *path, off_t *end, bool *cut)
{
    struct stat st;
    off_t z, p = 0, last = -1, last_end = 0;
    uint8_t h[LOG_HEADER], lh[LOG_HEADER];
    size_t last_len = 0;
    bool sound = false;

    if (fstat(fd, &st) != 0 || last_nonzero(fd, st.st_size, &z) != 0) {
        LOG_ERROR("leveldb log %s: %s", path, strerror(errno));
        return SX_EIO;
    }
    while (p < z) {
        off_t room = LOG_BLOCK - p % LOG_BLOCK;
        size_t len;

        if (room < LOG_HEADER) { /* a block's trailer */
            p += room;
            continue;
        }
        if (p + LOG_HEADER > st.st_size)
            return SX_EINVAL; /* ends inside a header: leveldb's EOF */
        if (read_at(fd, h, LOG_HEADER, p) != 0) {
            LOG_ERROR("leveldb log %s: read at %lld: %s", path, (long long)p, strerror(errno));
            return SX_EIO;
        }
        len = (size_t)h[4] | (size_t)h[5] << 8;
        if ((h[6] == 0 && len == 0) || (off_t)(LOG_HEADER + len) > room)
            return SX_EINVAL; /* zeros before the end, or no record */
        last = p;
        last_len = len;
        memcpy(lh, h, sizeof(h));
        p += LOG_HEADER + (off_t)len;
        last_end = p;
    }
    if (cut != NULL)
        *cut = false;
    if (last < 0) { /* nothing but zeros */
        *end = 0;
        return 0;
    }
    if (last_end > st.st_size)
        return SX_EINVAL; /* ends inside a record: leveldb's EOF */
    if (record_sound(fd, lh, last_len, last, &sound) != 0) {
        LOG_ERROR("leveldb log %s: read at %lld: %s", path, (long long)last, strerror(errno));
        return SX_EIO;
    }
    if (sound) {
        *end = last_end;
    } else if (z < last_end) {
        *end = last; /* being written when it stopped */
        if (cut != NULL)
            *cut = true;
    } else {
        return SX_EINVAL;
    }
    return 0;
}

int ldb_log_end(const char *path, off_t *end)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    int rc;

    if (fd < 0) {
        LOG_ERROR("leveldb log %s: %s", path, strerror(errno));
        return SX_EIO;
    }
    rc = log_end_fd(fd, path, end, NULL);
    close(fd);
    return rc;
}

/* Cuts log name of folder dfd (see ldb_logs_trim). */
static int trim_one(int dfd, const char *dir, const char *name)
{
    int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC);
    char path[4200];
    struct stat st;
    off_t end = 0;
    bool cut = false;
    int rc;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    if (fd < 0) {
        if (errno == ENOENT)
            return 0;
        LOG_ERROR("leveldb log %s: %s", path, strerror(errno));
        return SX_EIO;
    }
    rc = log_end_fd(fd, path, &end, &cut);
    if (rc == 0 && fstat(fd, &st) == 0 && end < st.st_size) {
        close(fd);
        if (cut)
            LOG_WARN("leveldb log %s: its last record, at %lld, was cut short (its writer "
                     "stopped half-way); dropped, as leveldb drops one at a file's end",
                     path, (long long)end);
        if ((fd = openat(dfd, name, O_WRONLY | O_CLOEXEC)) < 0 || ftruncate(fd, end) != 0) {
            LOG_ERROR("leveldb log %s: cut it at %lld: %s", path, (long long)end, strerror(errno));
            rc = SX_EIO;
        }
    }
    if (rc == SX_EINVAL)
        rc = 0; /* a tail for leveldb to judge */
    if (fd >= 0)
        close(fd);
    return rc;
}

int ldb_logs_trim(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int rc = 0;

    if (d == NULL) {
        if (errno == ENOENT)
            return 0;
        LOG_ERROR("leveldb %s: cannot list it: %s", dir, strerror(errno));
        return SX_EIO;
    }
    while (rc == 0) {
        errno = 0;
        if ((e = readdir(d)) == NULL) {
            if (errno != 0) {
                LOG_ERROR("leveldb %s: listing it: %s", dir, strerror(errno));
                rc = SX_EIO;
            }
            break;
        }
        if (is_log(e->d_name))
            rc = trim_one(dirfd(d), dir, e->d_name);
    }
    closedir(d);
    return rc;
}

/* The process's watch: one inotify instance, one watch per open database
 * (folder, bytes to preallocate, whether a failure was logged). */
typedef struct watched {
    int wd;
    char *dir;
    size_t bytes;
    bool warned;
} watched;

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static int reg_ino = -1;
static watched *reg;
static size_t nreg, capreg;

/* Preallocates log `name` of folder dir to `bytes`; returns 0 or the errno
 * of a failed fallocate. */
static int prealloc(const char *dir, const char *name, size_t bytes)
{
    char path[4200];
    struct statvfs vfs;
    int fd, err = 0;

    if (bytes == 0 || snprintf(path, sizeof(path), "%s/%s", dir, name) >= (int)sizeof(path))
        return 0;
    if ((fd = open(path, O_WRONLY | O_CLOEXEC)) < 0)
        return 0; /* gone already: switched and flushed */
    if (fstatvfs(fd, &vfs) == 0 &&
        (uint64_t)vfs.f_bavail * vfs.f_frsize < (uint64_t)bytes * FREE_FACTOR) {
        close(fd);
        return 0; /* leave a nearly full disk its room */
    }
    if (fallocate(fd, 0, 0, (off_t)bytes) != 0)
        err = errno;
    close(fd);
    return err;
}

/* Logs a failed preallocation in dir once per database; turns it off for
 * good there when the file system cannot do it. */
static void prealloc_failed(int wd, const char *dir, const char *name, int err)
{
    bool unsupported = err == EOPNOTSUPP || err == ENOSYS, log = false;

    pthread_mutex_lock(&reg_mu);
    for (size_t i = 0; i < nreg; i++) {
        if (reg[i].wd != wd)
            continue;
        log = !reg[i].warned;
        reg[i].warned = true;
        if (unsupported)
            reg[i].bytes = 0;
    }
    pthread_mutex_unlock(&reg_mu);
    if (log)
        LOG_WARN("leveldb log %s/%s: cannot preallocate it (%s)%s", dir, name, strerror(err),
                 unsupported ? "; logs grow as written on this file system"
                             : "; its syncs cost more until the next log");
}

/* The newest log in dir (the highest number) into name; false if none. */
static bool newest_log(const char *dir, char *name, size_t cap)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    unsigned long long best = 0;
    bool found = false;

    if (d == NULL)
        return false;
    while ((e = readdir(d)) != NULL) {
        unsigned long long num = strtoull(e->d_name, NULL, 10);

        if (is_log(e->d_name) && num >= best && strlen(e->d_name) < cap) {
            best = num;
            strcpy(name, e->d_name);
            found = true;
        }
    }
    closedir(d);
    return found;
}

/* Preallocates the newest log of the database watched as wd. */
static void prealloc_newest(int wd, const char *dir, size_t bytes)
{
    char name[256];
    int err;

    if (newest_log(dir, name, sizeof(name)) && (err = prealloc(dir, name, bytes)) != 0)
        prealloc_failed(wd, dir, name, err);
}

/* What one event asks (a new log in a watched folder: preallocated), with
 * the folder looked up under the lock and the work done outside it. */
static void on_event(const struct inotify_event *ev)
{
    char dir[4200] = "";
    size_t bytes = 0;

    pthread_mutex_lock(&reg_mu);
    for (size_t i = 0; i < nreg; i++) {
        if (reg[i].wd == ev->wd && strlen(reg[i].dir) < sizeof(dir)) {
            strcpy(dir, reg[i].dir);
            bytes = reg[i].bytes;
        }
    }
    pthread_mutex_unlock(&reg_mu);
    if (dir[0] != '\0' && bytes > 0) {
        int err = prealloc(dir, ev->name, bytes);

        if (err != 0)
            prealloc_failed(ev->wd, dir, ev->name, err);
    }
}

/* After a lost event (the queue overflowed): every database's newest log. */
static void on_overflow(void)
{
    for (size_t i = 0;; i++) {
        char dir[4200] = "";
        size_t bytes = 0;
        int wd = -1;

        pthread_mutex_lock(&reg_mu);
        if (i < nreg && strlen(reg[i].dir) < sizeof(dir)) {
            strcpy(dir, reg[i].dir);
            bytes = reg[i].bytes;
            wd = reg[i].wd;
        }
        pthread_mutex_unlock(&reg_mu);
        if (wd < 0)
            return;
        prealloc_newest(wd, dir, bytes);
    }
}

void ldb_logs_poll(void)
{
    union {
        struct inotify_event ev;
        char raw[4096];
    } u;
    int ino = __atomic_load_n(&reg_ino, __ATOMIC_ACQUIRE);

    if (ino < 0)
        return;
    for (;;) {
        ssize_t n = read(ino, u.raw, sizeof(u.raw));

        if (n <= 0)
            return; /* EAGAIN: nothing new */
        for (char *p = u.raw; p < u.raw + n;) {
            const struct inotify_event *ev = (const struct inotify_event *)p;

            if (ev->mask & IN_Q_OVERFLOW)
                on_overflow();
            else if (ev->len > 0 && (ev->mask & IN_CREATE) && is_log(ev->name))
                on_event(ev);
            p += sizeof(*ev) + ev->len;
        }
    }
}

/* The lock on folder dir into w->lockfd: 0, SX_EEXIST (held elsewhere) or
 * SX_EIO; ENOENT (no folder yet) is 0 with no lock. */
static int take_lock(ldb_logs *w, const char *dir)
{
    char path[4200];
    int fd;

    if (snprintf(path, sizeof(path), "%s/" LOCK_NAME, dir) >= (int)sizeof(path)) {
        LOG_ERROR("leveldb %s: path too long", dir);
        return SX_EIO;
    }
    if ((fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644)) < 0) {
        if (errno == ENOENT)
            return 0;
        LOG_ERROR("leveldb %s: %s: %s", dir, LOCK_NAME, strerror(errno));
        return SX_EIO;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int err = errno;

        close(fd);
        if (err == EWOULDBLOCK) {
            LOG_ERROR("leveldb %s: in use (another open holds %s)", dir, LOCK_NAME);
            return SX_EEXIST;
        }
        LOG_ERROR("leveldb %s: lock %s: %s", dir, LOCK_NAME, strerror(err));
        return SX_EIO;
    }
    w->lockfd = fd;
    return 0;
}

int ldb_logs_open(ldb_logs *w, const char *dir)
{
    int rc;

    w->wd = -1;
    w->lockfd = -1;
    if ((rc = take_lock(w, dir)) != 0)
        return rc;
    return w->lockfd >= 0 ? ldb_logs_trim(dir) : 0;
}

/* SHARDEX_LOG_PREALLOC_MB, or dflt when unset (a bad value is logged). */
static size_t prealloc_bytes(size_t dflt)
{
    static atomic_bool told;
    const char *env = getenv("SHARDEX_LOG_PREALLOC_MB");
    char *endp;
    unsigned long mb;

    if (env == NULL || *env == '\0')
        return dflt;
    errno = 0;
    mb = strtoul(env, &endp, 10);
    if (errno == 0 && *endp == '\0' && mb <= 4096)
        return (size_t)mb << 20;
    if (!atomic_exchange(&told, true))
        LOG_WARN("SHARDEX_LOG_PREALLOC_MB=%s: not a number of MiB from 0 to 4096; ignored", env);
    return dflt;
}

void ldb_logs_watch(ldb_logs *w, const char *dir, size_t bytes)
{
    watched e = { .wd = -1, .bytes = prealloc_bytes(bytes) };

    if (w->lockfd < 0)
        (void)take_lock(w, dir); /* the folder is leveldb's now */
    if (e.bytes == 0)
        return;
    pthread_mutex_lock(&reg_mu);
    if (reg_ino < 0) {
        int ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);

        if (ino < 0)
            LOG_WARN("leveldb: no inotify (%s): logs grow as written", strerror(errno));
        __atomic_store_n(&reg_ino, ino, __ATOMIC_RELEASE);
    }
    if (reg_ino >= 0 && nreg == capreg) {
        size_t cap = capreg ? 2 * capreg : 8;
        watched *r = realloc(reg, cap * sizeof(*r));

        if (r != NULL) {
            reg = r;
            capreg = cap;
        }
    }
    if (reg_ino >= 0 && nreg < capreg && (e.dir = strdup(dir)) != NULL &&
        (e.wd = inotify_add_watch(reg_ino, dir, IN_CREATE | IN_ONLYDIR)) >= 0) {
        reg[nreg++] = e;
        w->wd = e.wd;
    } else if (reg_ino >= 0) {
        LOG_WARN("leveldb %s: cannot watch it for new logs (%s); they grow as written", dir,
                 e.dir == NULL || nreg >= capreg ? "out of memory" : strerror(errno));
        free(e.dir);
    }
    pthread_mutex_unlock(&reg_mu);
    if (w->wd >= 0)
        prealloc_newest(w->wd, dir, e.bytes);
}

void ldb_logs_close(ldb_logs *w, const char *dir)
{
    if (w->wd >= 0) {
        pthread_mutex_lock(&reg_mu);
        for (size_t i = 0; i < nreg; i++) {
            if (reg[i].wd == w->wd) {
                inotify_rm_watch(reg_ino, w->wd);
                free(reg[i].dir);
                reg[i] = reg[--nreg];
                break;
            }
        }
        pthread_mutex_unlock(&reg_mu);
        w->wd = -1;
    }
    if (w->lockfd >= 0) {
        (void)ldb_logs_trim(dir); /* a clean stop leaves no zero tail */
        close(w->lockfd);         /* releases the lock */
        w->lockfd = -1;
    }
}
