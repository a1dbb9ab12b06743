/*
 * ldb_log.c — leveldb's logs preallocated ahead of its writes, and their
 * zero tails trimmed before an open. See ldb_log.h for why.
 */
#define _GNU_SOURCE             /* fallocate */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
/* Preallocate only while the disk keeps this many times the size free
 * afterwards: a nearly full disk needs its room for compactions. */
#define FREE_FACTOR 16

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

/* CRC-32C (Castagnoli), as leveldb checks its records. */
static uint32_t crc32c(const uint8_t *p, size_t n)
{
    static uint32_t table[256];
    static atomic_bool ready;
    uint32_t c = 0xffffffffu;

    if (!atomic_load(&ready)) {         /* idempotent: racing fillers agree */
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t v = i;

            for (int k = 0; k < 8; k++)
                v = v & 1 ? (v >> 1) ^ 0x82f63b78u : v >> 1;
            table[i] = v;
        }
        atomic_store(&ready, true);
    }
    while (n--)
        c = table[(c ^ *p++) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

/* Whether the record at off (header h, data length len) has the checksum
 * leveldb gave it (over its type and data, masked). */
static int record_sound(int fd, const uint8_t *h, size_t len, off_t off, bool *sound)
{
    uint8_t buf[1 + LOG_BLOCK];
    uint32_t want = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 |
                    (uint32_t)h[3] << 24, got;

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

    if (buf == NULL)
        return SX_ENOMEM;
    *z = 0;
    while (hi > 0) {
        off_t lo = hi > READ_CHUNK ? hi - READ_CHUNK : 0;
        size_t n = (size_t)(hi - lo);

        if (read_at(fd, buf, n, lo) != 0) {
            free(buf);
            return SX_EIO;
        }
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

/* Where leveldb's last write to log fd ended, into *end (see ldb_log_end);
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
static int log_end_fd(int fd, const char *path, off_t *end)
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

        if (room < LOG_HEADER) {        /* a block's trailer */
            p += room;
            continue;
        }
        if (read_at(fd, h, LOG_HEADER, p) != 0) {
            LOG_ERROR("leveldb log %s: read at %lld: %s", path, (long long)p,
                      strerror(errno));
            return SX_EIO;
        }
        len = (size_t)h[4] | (size_t)h[5] << 8;
        if ((h[6] == 0 && len == 0) || (off_t)(LOG_HEADER + len) > room)
            return SX_EINVAL;           /* zeros before the end, or no record */
        last = p;
        last_len = len;
        memcpy(lh, h, sizeof(h));
        p += LOG_HEADER + (off_t)len;
        last_end = p;
    }
    if (last < 0) {                     /* nothing but zeros */
        *end = 0;
        return 0;
    }
    if (record_sound(fd, lh, last_len, last, &sound) != 0) {
        LOG_ERROR("leveldb log %s: read at %lld: %s", path, (long long)last,
                  strerror(errno));
        return SX_EIO;
    }
    if (sound)
        *end = last_end;
    else if (z < last_end)
        *end = last;                    /* being written when it stopped */
    else
        return SX_EINVAL;
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
    rc = log_end_fd(fd, path, end);
    close(fd);
    return rc;
}

/* Trims log name of folder dfd (see ldb_logs_trim). */
static int trim_one(int dfd, const char *dir, const char *name)
{
    int fd = openat(dfd, name, O_RDWR | O_CLOEXEC);
    char path[4200];
    struct stat st;
    off_t end = 0;
    int rc;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    if (fd < 0) {
        if (errno == ENOENT)
            return 0;
        LOG_ERROR("leveldb log %s: %s", path, strerror(errno));
        return SX_EIO;
    }
    rc = log_end_fd(fd, path, &end);
    if (rc == SX_EINVAL)
        rc = 0;                         /* a tail for leveldb to judge */
    else if (rc == 0 && fstat(fd, &st) == 0 && end < st.st_size) {
        if (ftruncate(fd, end) != 0) {
            LOG_ERROR("leveldb log %s: cut its preallocated tail at %lld: %s", path,
                      (long long)end, strerror(errno));
            rc = SX_EIO;
        }
    }
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

/* Logs a failed preallocation once per database; off for good when the
 * file system cannot do it. */
static void prealloc_failed(ldb_logs *w, const char *path, int err)
{
    bool unsupported = err == EOPNOTSUPP || err == ENOSYS;

    if (!atomic_exchange(&w->warned, true))
        LOG_WARN("leveldb log %s: cannot preallocate it (%s)%s", path, strerror(err),
                 unsupported ? "; logs grow as written on this file system"
                             : "; its syncs cost more until the next log");
    if (unsupported)
        atomic_store(&w->bytes, 0);
}

/* Preallocates log name of folder dir to w->bytes. */
static void prealloc(ldb_logs *w, const char *dir, const char *name)
{
    size_t bytes = atomic_load(&w->bytes);
    char path[4200];
    struct statvfs vfs;
    int fd;

    if (bytes == 0 || snprintf(path, sizeof(path), "%s/%s", dir, name) >= (int)sizeof(path))
        return;
    if ((fd = open(path, O_WRONLY | O_CLOEXEC)) < 0)
        return;                         /* gone already: switched and flushed */
    if (fstatvfs(fd, &vfs) == 0 &&
        (uint64_t)vfs.f_bavail * vfs.f_frsize < (uint64_t)bytes * FREE_FACTOR) {
        close(fd);
        return;                         /* leave a nearly full disk its room */
    }
    if (fallocate(fd, 0, 0, (off_t)bytes) != 0)
        prealloc_failed(w, path, errno);
    close(fd);
}

/* The newest log in dir (the highest number), preallocated. */
static void prealloc_newest(ldb_logs *w, const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    unsigned long long best = 0;
    char name[256] = "";

    if (d == NULL)
        return;
    while ((e = readdir(d)) != NULL) {
        unsigned long long num = strtoull(e->d_name, NULL, 10);

        if (is_log(e->d_name) && num >= best && strlen(e->d_name) < sizeof(name)) {
            best = num;
            strcpy(name, e->d_name);
        }
    }
    closedir(d);
    if (name[0] != '\0')
        prealloc(w, dir, name);
}

void ldb_logs_watch(ldb_logs *w, const char *dir, size_t bytes)
{
    const char *env = getenv("SHARDEX_LOG_PREALLOC_MB");

    w->ino = -1;
    atomic_init(&w->warned, false);
    atomic_init(&w->bytes, 0);
    if (env != NULL && *env != '\0') {
        char *endp;
        unsigned long mb = strtoul(env, &endp, 10);

        if (*endp == '\0' && mb <= 4096)
            bytes = (size_t)mb << 20;
    }
    if (bytes == 0)
        return;
    w->ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (w->ino < 0 || inotify_add_watch(w->ino, dir, IN_CREATE | IN_ONLYDIR) < 0) {
        LOG_WARN("leveldb %s: cannot watch it for new logs (%s); they grow as written",
                 dir, strerror(errno));
        if (w->ino >= 0)
            close(w->ino);
        w->ino = -1;
        return;
    }
    atomic_store(&w->bytes, bytes);
    prealloc_newest(w, dir);
}

void ldb_logs_poll(ldb_logs *w, const char *dir)
{
    union {
        struct inotify_event ev;
        char raw[4096];
    } u;

    if (w->ino < 0)
        return;
    for (;;) {
        ssize_t n = read(w->ino, u.raw, sizeof(u.raw));

        if (n <= 0)
            return;                     /* EAGAIN: nothing new */
        for (char *p = u.raw; p < u.raw + n;) {
            const struct inotify_event *ev = (const struct inotify_event *)p;

            if (ev->mask & IN_Q_OVERFLOW)
                prealloc_newest(w, dir);
            else if (ev->len > 0 && is_log(ev->name))
                prealloc(w, dir, ev->name);
            p += sizeof(*ev) + ev->len;
        }
    }
}

void ldb_logs_close(ldb_logs *w)
{
    if (w->ino >= 0)
        close(w->ino);
    w->ino = -1;
}
