/*
 * ldb_snap.c — snapshots of a leveldb key range as files: a buffered,
 * checksummed writer (make), chunk reads (serve), the staging file a
 * follower receives chunks into, one bounded parser of a file (verify, and
 * install's second pass), and install with its crash marker. The format
 * and the contracts are in ldb_snap.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <sodium.h>
#include "hash.h"
#include "ldb_snap.h"
#include "sx_errors.h"

static const uint8_t snap_magic[8] = { 'S', 'X', 'L', 'D', 'B', 'S', 'N', 'P' };

/* The smallest file: a header with empty bounds and meta, no record, the
 * trailer. */
#define SNAP_MIN_SIZE (8u + 4u + 4u + 4u + 8u + 4u + LDB_SNAP_TRAILER)

#define SNAP_IO_BUF (1u << 20) /* the writer's and the parser's buffer */

/* Writes a one-line message into err[errlen] (err may be NULL). */
static void seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    if (err == NULL || errlen == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Bytewise order, leveldb's default comparator: a < b. */
static bool key_less(const uint8_t *a, size_t an, const uint8_t *b, size_t bn)
{
    size_t m = an < bn ? an : bn;
    int c = m ? memcmp(a, b, m) : 0;

    return c < 0 || (c == 0 && an < bn);
}

static bool key_eq(const uint8_t *a, size_t an, const uint8_t *b, size_t bn)
{
    return an == bn && (an == 0 || memcmp(a, b, an) == 0);
}

/* Whether k is in [lo, hi) (hi_n == 0: no upper bound). */
static bool in_range(const uint8_t *k, size_t kn, const uint8_t *lo, size_t lo_n, const uint8_t *hi,
                     size_t hi_n)
{
    return !key_less(k, kn, lo, lo_n) && (hi_n == 0 || key_less(k, kn, hi, hi_n));
}

/* libsodium ready (BLAKE2b's fastest implementation picked); idempotent
 * and thread-safe. */
static int sodium_ready(char *err, size_t errlen)
{
    if (sodium_init() < 0) {
        seterr(err, errlen, "libsodium failed to initialise");
        return SX_EIO;
    }
    return 0;
}

/* Writes all of p[n] at the file's position. Returns 0 or an errno. */
static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);

        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return errno;
        if (w == 0)
            return EIO;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Writes all of p[n] at offset off. Returns 0 or an errno. */
static int pwrite_all(int fd, const uint8_t *p, size_t n, uint64_t off)
{
    while (n > 0) {
        ssize_t w = pwrite(fd, p, n, (off_t)off);

        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return errno;
        if (w == 0)
            return EIO;
        p += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return 0;
}

/* ---- make: a buffered writer that hashes what passes through it ---- */

typedef struct snap_wr {
    int fd;
    uint8_t *buf; /* SNAP_IO_BUF bytes */
    size_t n;     /* buffered */
    uint64_t off; /* bytes put so far (the file's size once flushed) */
    int eno;      /* the first write error, sticky */
    crypto_generichash_state h;
} snap_wr;

static void wr_flush(snap_wr *w)
{
    if (w->eno == 0 && w->n > 0)
        w->eno = write_all(w->fd, w->buf, w->n);
    w->n = 0;
}

/* Appends p[n] to the file, hashing it when hash is set. */
static void wr_raw(snap_wr *w, const void *p, size_t n, bool hash)
{
    if (n == 0 || w->eno != 0)
        return;
    if (hash)
        crypto_generichash_update(&w->h, p, n);
    w->off += n;
    if (w->n + n > SNAP_IO_BUF)
        wr_flush(w);
    if (n >= SNAP_IO_BUF) { /* a large value: straight to the file */
        if (w->eno == 0)
            w->eno = write_all(w->fd, p, n);
        return;
    }
    memcpy(w->buf + w->n, p, n);
    w->n += n;
}

static void wr_put(snap_wr *w, const void *p, size_t n)
{
    wr_raw(w, p, n, true);
}

static void wr_u32(snap_wr *w, uint32_t v)
{
    uint8_t b[4];

    be_put32(b, v);
    wr_put(w, b, sizeof(b));
}

static void wr_u64(snap_wr *w, uint64_t v)
{
    uint8_t b[8];

    be_put64(b, v);
    wr_put(w, b, sizeof(b));
}

typedef struct make_ctx {
    snap_wr *w;
    uint64_t count;
    int rc; /* why the scan stopped, with its message */
    char *err;
    size_t errlen;
} make_ctx;

/* ldb_visit: one record. Never returns 1 (ldb_scan's "stop, no error"). */
static int make_visit(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    make_ctx *c = arg;

    if (kn > LDB_SNAP_KEY_MAX || vn > UINT32_MAX) {
        seterr(c->err, c->errlen, "a key of %zu bytes or a value of %zu exceeds the format's limit",
               kn, vn);
        return c->rc = SX_EINVAL;
    }
    wr_u32(c->w, (uint32_t)kn);
    wr_u32(c->w, (uint32_t)vn);
    wr_put(c->w, k, kn);
    wr_put(c->w, v, vn);
    c->count++;
    if (c->w->eno != 0) {
        seterr(c->err, c->errlen, "write: %s", strerror(c->w->eno));
        return c->rc = SX_EIO;
    }
    return 0;
}

/* Writes the whole file to w: header, the scanned records, trailer. */
static int make_write(ldb *d, const leveldb_snapshot_t *snap, const void *lo, size_t lo_n,
                      const void *hi, size_t hi_n, uint64_t applied, const void *meta,
                      size_t meta_n, snap_wr *w, char *err, size_t errlen)
{
    make_ctx c = { .w = w, .err = err, .errlen = errlen };
    uint8_t sum[LDB_SNAP_SUM_BYTES];
    int rc;

    wr_put(w, snap_magic, sizeof(snap_magic));
    wr_u32(w, LDB_SNAP_VERSION);
    wr_u32(w, (uint32_t)lo_n);
    wr_put(w, lo, lo_n);
    wr_u32(w, (uint32_t)hi_n);
    wr_put(w, hi, hi_n);
    wr_u64(w, applied);
    wr_u32(w, (uint32_t)meta_n);
    wr_put(w, meta, meta_n);

    rc = ldb_scan_nocache(d, snap, lo, lo_n, hi, hi_n, make_visit, &c);
    if (rc != 0) {
        if (c.rc == 0) /* leveldb's: ldb_scan logged it */
            seterr(err, errlen, "reading the range from leveldb: %s", sx_strerror(rc));
        return rc;
    }
    wr_u64(w, c.count);
    wr_u64(w, w->off + 8 + LDB_SNAP_SUM_BYTES); /* total: the size */
    crypto_generichash_final(&w->h, sum, sizeof(sum));
    wr_raw(w, sum, sizeof(sum), false);
    wr_flush(w);
    if (w->eno != 0) {
        seterr(err, errlen, "write: %s", strerror(w->eno));
        return SX_EIO;
    }
    return 0;
}

int ldb_snap_make(ldb *d, const leveldb_snapshot_t *snap, const void *lo, size_t lo_n,
                  const void *hi, size_t hi_n, uint64_t applied, const void *meta, size_t meta_n,
                  const char *path, uint64_t *size_out, char *err, size_t errlen)
{
    snap_wr w = { .fd = -1 };
    char *tmp = NULL;
    int rc;

    if (d == NULL || path == NULL || (lo_n && !lo) || (hi_n && !hi) || (meta_n && !meta) ||
        lo_n > LDB_SNAP_BOUND_MAX || hi_n > LDB_SNAP_BOUND_MAX || meta_n > LDB_SNAP_META_MAX ||
        (hi_n > 0 && key_less(hi, hi_n, lo, lo_n))) {
        seterr(err, errlen, "snapshot %s: bad arguments (bounds of %zu and %zu bytes, meta of %zu)",
               path ? path : "(null)", lo_n, hi_n, meta_n);
        return SX_EINVAL;
    }
    if ((rc = sodium_ready(err, errlen)) != 0)
        return rc;
    if ((tmp = malloc(strlen(path) + 5)) == NULL || (w.buf = malloc(SNAP_IO_BUF)) == NULL) {
        seterr(err, errlen, "snapshot %s: out of memory", path);
        rc = SX_ENOMEM;
        goto err_after_alloc;
    }
    sprintf(tmp, "%s.tmp", path);
    crypto_generichash_init(&w.h, NULL, 0, LDB_SNAP_SUM_BYTES);
    if ((w.fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0) {
        seterr(err, errlen, "snapshot %s: create: %s", tmp, strerror(errno));
        rc = SX_EIO;
        goto err_after_alloc;
    }
    if ((rc = make_write(d, snap, lo, lo_n, hi, hi_n, applied, meta, meta_n, &w, err, errlen)) !=
        0) {
        char m[256];

        snprintf(m, sizeof(m), "%s", err && errlen ? err : "");
        seterr(err, errlen, "snapshot %s: %s", tmp, m);
        goto err_after_open;
    }
    if (fsync(w.fd) != 0) {
        seterr(err, errlen, "snapshot %s: fsync: %s", tmp, strerror(errno));
        rc = SX_EIO;
        goto err_after_open;
    }
    rc = close(w.fd);
    w.fd = -1;
    if (rc != 0) {
        seterr(err, errlen, "snapshot %s: close: %s", tmp, strerror(errno));
        rc = SX_EIO;
        goto err_after_open;
    }
    if (rename(tmp, path) != 0) {
        seterr(err, errlen, "snapshot %s: rename from %s: %s", path, tmp, strerror(errno));
        rc = SX_EIO;
        goto err_after_open;
    }
    if (ldb_sync_parent(path) != 0) { /* path is complete; only its name may not last */
        seterr(err, errlen, "snapshot %s: fsync of its folder failed", path);
        rc = SX_EIO;
        goto err_after_alloc;
    }
    if (size_out != NULL)
        *size_out = w.off;
    free(w.buf);
    free(tmp);
    return 0;

err_after_open:
    if (w.fd >= 0)
        close(w.fd);
    unlink(tmp);
err_after_alloc:
    free(w.buf);
    free(tmp);
    return rc;
}

/* ---- serve and receive ---- */

int ldb_snap_read(const char *path, uint64_t offset, void *buf, size_t len, size_t *got, char *err,
                  size_t errlen)
{
    struct stat st;
    size_t n = 0;
    int fd, rc = 0;

    *got = 0;
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
        seterr(err, errlen, "snapshot %s: open: %s", path, strerror(errno));
        return errno == ENOENT ? SX_ENOTFOUND : SX_EIO;
    }
    if (fstat(fd, &st) != 0) {
        seterr(err, errlen, "snapshot %s: stat: %s", path, strerror(errno));
        rc = SX_EIO;
    } else if (offset > (uint64_t)st.st_size) {
        seterr(err, errlen, "snapshot %s: offset %llu is past its end (%llu bytes)", path,
               (unsigned long long)offset, (unsigned long long)st.st_size);
        rc = SX_EINVAL;
    }
    while (rc == 0 && n < len) {
        ssize_t r = pread(fd, (uint8_t *)buf + n, len - n, (off_t)(offset + n));

        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            seterr(err, errlen, "snapshot %s: read at %llu: %s", path,
                   (unsigned long long)(offset + n), strerror(errno));
            rc = SX_EIO;
        }
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    if (rc == 0)
        *got = n;
    return rc;
}

int ldb_snap_stage_size(const char *path, uint64_t *len, char *err, size_t errlen)
{
    struct stat st;

    *len = 0;
    if (stat(path, &st) != 0) {
        if (errno == ENOENT)
            return 0;
        seterr(err, errlen, "staging %s: stat: %s", path, strerror(errno));
        return SX_EIO;
    }
    *len = (uint64_t)st.st_size;
    return 0;
}

int ldb_snap_stage_write(const char *path, uint64_t offset, const void *data, size_t len,
                         uint64_t *staged, char *err, size_t errlen)
{
    struct stat st;
    int fd, eno;

    if (offset > UINT64_MAX - len || (len > 0 && data == NULL)) {
        seterr(err, errlen, "staging %s: bad chunk", path);
        return SX_EINVAL;
    }
    if (offset == 0)
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    else
        fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 && offset > 0 && errno == ENOENT) {
        seterr(err, errlen, "staging %s: a chunk at %llu, but nothing is staged", path,
               (unsigned long long)offset);
        if (staged != NULL)
            *staged = 0;
        return SX_EINVAL;
    }
    if (fd < 0) {
        seterr(err, errlen, "staging %s: open: %s", path, strerror(errno));
        return SX_EIO;
    }
    if (offset > 0) {
        if (fstat(fd, &st) != 0) {
            seterr(err, errlen, "staging %s: stat: %s", path, strerror(errno));
            close(fd);
            return SX_EIO;
        }
        if ((uint64_t)st.st_size != offset) {
            seterr(err, errlen, "staging %s: a chunk at %llu, but %llu bytes are staged", path,
                   (unsigned long long)offset, (unsigned long long)st.st_size);
            if (staged != NULL)
                *staged = (uint64_t)st.st_size;
            close(fd);
            return SX_EINVAL;
        }
    }
    eno = pwrite_all(fd, data, len, offset);
    if (close(fd) != 0 && eno == 0)
        eno = errno;
    if (eno != 0) {
        seterr(err, errlen, "staging %s: write at %llu: %s", path, (unsigned long long)offset,
               strerror(eno));
        return SX_EIO;
    }
    if (staged != NULL)
        *staged = offset + len;
    return 0;
}

int ldb_snap_stage_sync(const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);

    if (fd < 0) {
        seterr(err, errlen, "staging %s: open: %s", path, strerror(errno));
        return errno == ENOENT ? SX_ENOTFOUND : SX_EIO;
    }
    if (fsync(fd) != 0) {
        seterr(err, errlen, "staging %s: fsync: %s", path, strerror(errno));
        close(fd);
        return SX_EIO;
    }
    if (close(fd) != 0) {
        seterr(err, errlen, "staging %s: close: %s", path, strerror(errno));
        return SX_EIO;
    }
    if (ldb_sync_parent(path) != 0) {
        seterr(err, errlen, "staging %s: fsync of its folder failed", path);
        return SX_EIO;
    }
    return 0;
}

/* ---- the parser: verify, and install's second pass ---- */

typedef struct snap_rd {
    int fd;
    const char *path;
    uint8_t *buf;      /* SNAP_IO_BUF bytes */
    size_t pos, len;   /* buf[pos..len) not yet taken */
    uint64_t at;       /* the file offset of the next byte taken */
    uint64_t limit;    /* no take may pass it */
    uint64_t size;     /* the file's size (fstat) */
    uint64_t read_to;  /* the file offset after buf[len] */
    uint64_t hash_end; /* the checksum covers [0, hash_end) */
    crypto_generichash_state h;
    char *err;
    size_t errlen;
} snap_rd;

/* Takes n bytes into dst (NULL: skips them), what: for a message. Returns
 * 0, SX_EPROTO (past the limit, or the file is shorter than it was) or
 * SX_EIO. */
static int rd_take(snap_rd *r, void *dst, uint64_t n, const char *what)
{
    uint8_t *p = dst;

    if (n > r->limit - r->at) {
        seterr(r->err, r->errlen,
               "snapshot %s: %s at offset %llu (%llu bytes) runs past the %s (offset %llu)",
               r->path, what, (unsigned long long)r->at, (unsigned long long)n,
               r->limit == r->size ? "file's end" : "records' end", (unsigned long long)r->limit);
        return SX_EPROTO;
    }
    while (n > 0) {
        size_t m;

        if (r->pos == r->len) {
            ssize_t got = read(r->fd, r->buf, SNAP_IO_BUF);

            if (got < 0 && errno == EINTR)
                continue;
            if (got < 0) {
                seterr(r->err, r->errlen, "snapshot %s: read at %llu: %s", r->path,
                       (unsigned long long)r->read_to, strerror(errno));
                return SX_EIO;
            }
            if (got == 0) {
                seterr(r->err, r->errlen, "snapshot %s: ends at %llu, before its size %llu",
                       r->path, (unsigned long long)r->read_to, (unsigned long long)r->size);
                return SX_EPROTO;
            }
            if (r->read_to < r->hash_end) {
                uint64_t h = r->hash_end - r->read_to;

                crypto_generichash_update(&r->h, r->buf, h < (uint64_t)got ? h : (uint64_t)got);
            }
            r->read_to += (uint64_t)got;
            r->pos = 0;
            r->len = (size_t)got;
        }
        m = r->len - r->pos;
        if (m > n)
            m = (size_t)n;
        if (p != NULL) {
            memcpy(p, r->buf + r->pos, m);
            p += m;
        }
        r->pos += m;
        r->at += m;
        n -= m;
    }
    return 0;
}

static int rd_u32(snap_rd *r, uint32_t *v, const char *what)
{
    uint8_t b[4];
    int rc = rd_take(r, b, sizeof(b), what);

    *v = rc == 0 ? be_get32(b) : 0;
    return rc;
}

static int rd_u64(snap_rd *r, uint64_t *v, const char *what)
{
    uint8_t b[8];
    int rc = rd_take(r, b, sizeof(b), what);

    *v = rc == 0 ? be_get64(b) : 0;
    return rc;
}

/* Makes *p hold at least n bytes (n > 0). Returns 0 or SX_ENOMEM. */
static int grow(uint8_t **p, size_t *cap, size_t n)
{
    uint8_t *q;

    if (n <= *cap)
        return 0;
    if ((q = realloc(*p, n)) == NULL)
        return SX_ENOMEM;
    *p = q;
    *cap = n;
    return 0;
}

/* Called by snap_walk with each record; returns 0 or an sx_err, which
 * stops the walk. */
typedef int (*snap_rec_fn)(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn);

/* The header, into info. */
static int walk_header(snap_rd *r, ldb_snap_info *info)
{
    uint8_t magic[sizeof(snap_magic)];
    uint32_t version, n;
    int rc;

    if ((rc = rd_take(r, magic, sizeof(magic), "the magic")) != 0)
        return rc;
    if (memcmp(magic, snap_magic, sizeof(magic)) != 0) {
        seterr(r->err, r->errlen, "snapshot %s: not a snapshot file (bad magic)", r->path);
        return SX_EPROTO;
    }
    if ((rc = rd_u32(r, &version, "the version")) != 0)
        return rc;
    if (version != LDB_SNAP_VERSION) {
        seterr(r->err, r->errlen, "snapshot %s: format version %u, this build reads %u", r->path,
               version, LDB_SNAP_VERSION);
        return SX_EVERSION;
    }
    if ((rc = rd_u32(r, &n, "lo's length")) != 0)
        return rc;
    if (n > LDB_SNAP_BOUND_MAX) {
        seterr(r->err, r->errlen, "snapshot %s: lo of %u bytes (at most %u)", r->path, n,
               LDB_SNAP_BOUND_MAX);
        return SX_EPROTO;
    }
    info->lo_n = n;
    if ((rc = rd_take(r, info->lo, n, "lo")) != 0 || (rc = rd_u32(r, &n, "hi's length")) != 0)
        return rc;
    if (n > LDB_SNAP_BOUND_MAX) {
        seterr(r->err, r->errlen, "snapshot %s: hi of %u bytes (at most %u)", r->path, n,
               LDB_SNAP_BOUND_MAX);
        return SX_EPROTO;
    }
    info->hi_n = n;
    if ((rc = rd_take(r, info->hi, n, "hi")) != 0)
        return rc;
    if (info->hi_n > 0 && key_less(info->hi, info->hi_n, info->lo, info->lo_n)) {
        seterr(r->err, r->errlen, "snapshot %s: its range's hi sorts below its lo", r->path);
        return SX_EPROTO;
    }
    if ((rc = rd_u64(r, &info->applied, "the applied index")) != 0 ||
        (rc = rd_u32(r, &n, "meta's length")) != 0)
        return rc;
    if (n > LDB_SNAP_META_MAX) {
        seterr(r->err, r->errlen, "snapshot %s: meta of %u bytes (at most %u)", r->path, n,
               LDB_SNAP_META_MAX);
        return SX_EPROTO;
    }
    info->meta_n = n;
    return rd_take(r, info->meta, n, "meta");
}

/* The bytes a walk holds: the current key, the one before it, a value. */
typedef struct walk_bufs {
    uint8_t *k, *prev, *v;
    size_t k_cap, prev_cap, v_cap;
} walk_bufs;

/* The records, each checked and handed to fn (NULL: values skipped). */
static int walk_records(snap_rd *r, ldb_snap_info *info, const uint8_t *forbid, size_t forbid_n,
                        snap_rec_fn fn, void *arg, walk_bufs *wb)
{
    size_t prev_n = 0;
    int rc;

    info->records = 0;
    while (r->at < r->limit) {
        uint64_t i = info->records;
        uint32_t kn, vn;

        if ((rc = rd_u32(r, &kn, "a record's key length")) != 0 ||
            (rc = rd_u32(r, &vn, "a record's value length")) != 0)
            return rc;
        if (kn > LDB_SNAP_KEY_MAX || (uint64_t)kn + vn > r->limit - r->at) {
            seterr(r->err, r->errlen,
                   "snapshot %s: record %llu (key %u bytes, value %u) does not fit before the "
                   "records' end (offset %llu)",
                   r->path, (unsigned long long)i, kn, vn, (unsigned long long)r->limit);
            return SX_EPROTO;
        }
        if ((rc = grow(&wb->k, &wb->k_cap, (size_t)kn + 1)) != 0) {
            seterr(r->err, r->errlen, "snapshot %s: out of memory", r->path);
            return rc;
        }
        if ((rc = rd_take(r, wb->k, kn, "a key")) != 0)
            return rc;
        if (i > 0 && !key_less(wb->prev, prev_n, wb->k, kn)) {
            seterr(r->err, r->errlen, "snapshot %s: record %llu's key does not sort after the last",
                   r->path, (unsigned long long)i);
            return SX_EPROTO;
        }
        if (!in_range(wb->k, kn, info->lo, info->lo_n, info->hi, info->hi_n)) {
            seterr(r->err, r->errlen, "snapshot %s: record %llu's key is outside its range",
                   r->path, (unsigned long long)i);
            return SX_EPROTO;
        }
        if (forbid != NULL && key_eq(wb->k, kn, forbid, forbid_n)) {
            seterr(r->err, r->errlen, "snapshot %s: record %llu has the install marker's key",
                   r->path, (unsigned long long)i);
            return SX_EINVAL;
        }
        if (fn == NULL) {
            rc = rd_take(r, NULL, vn, "a value");
        } else if ((rc = grow(&wb->v, &wb->v_cap, (size_t)vn + 1)) != 0) {
            seterr(r->err, r->errlen, "snapshot %s: out of memory for a value of %u bytes", r->path,
                   vn);
        } else if ((rc = rd_take(r, wb->v, vn, "a value")) == 0) {
            rc = fn(arg, wb->k, kn, wb->v, vn);
        }
        if (rc != 0)
            return rc;
        { /* this key becomes the last one */
            uint8_t *t = wb->prev;
            size_t tc = wb->prev_cap;

            wb->prev = wb->k;
            wb->prev_cap = wb->k_cap;
            wb->k = t;
            wb->k_cap = tc;
            prev_n = kn;
        }
        info->records = i + 1;
    }
    return 0;
}

/* The trailer: count, total and checksum checked. */
static int walk_trailer(snap_rd *r, ldb_snap_info *info)
{
    uint64_t count, total;
    uint8_t sum[LDB_SNAP_SUM_BYTES];
    int rc;

    r->limit = r->size;
    if ((rc = rd_u64(r, &count, "the record count")) != 0 ||
        (rc = rd_u64(r, &total, "the total size")) != 0)
        return rc;
    crypto_generichash_final(&r->h, sum, sizeof(sum));
    if ((rc = rd_take(r, info->sum, sizeof(info->sum), "the checksum")) != 0)
        return rc;
    if (count != info->records) {
        seterr(r->err, r->errlen, "snapshot %s: its trailer counts %llu records, it holds %llu",
               r->path, (unsigned long long)count, (unsigned long long)info->records);
        return SX_EPROTO;
    }
    if (total != r->size) {
        seterr(r->err, r->errlen, "snapshot %s: its trailer says %llu bytes, the file has %llu",
               r->path, (unsigned long long)total, (unsigned long long)r->size);
        return SX_EPROTO;
    }
    if (sodium_memcmp(sum, info->sum, sizeof(sum)) != 0) {
        seterr(r->err, r->errlen, "snapshot %s: checksum mismatch (the file is corrupt)", r->path);
        return SX_EPROTO;
    }
    return 0;
}

/* Parses and checks the file at path (ldb_snap_verify's checks), filling
 * info, and hands each record to fn (NULL: none, values skipped); a record
 * whose key is forbid (forbid NULL: none) is SX_EINVAL. fn sees records
 * before the checksum is known: a caller that writes them must be able to
 * throw them away (install's marker). */
static int snap_walk(const char *path, ldb_snap_info *info, const uint8_t *forbid, size_t forbid_n,
                     snap_rec_fn fn, void *arg, char *err, size_t errlen)
{
    snap_rd r = { .fd = -1, .path = path, .err = err, .errlen = errlen };
    walk_bufs wb = { 0 };
    struct stat st;
    int rc;

    if ((rc = sodium_ready(err, errlen)) != 0)
        return rc;
    if ((r.fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
        seterr(err, errlen, "snapshot %s: open: %s", path, strerror(errno));
        return errno == ENOENT ? SX_ENOTFOUND : SX_EIO;
    }
    if (fstat(r.fd, &st) != 0) {
        seterr(err, errlen, "snapshot %s: stat: %s", path, strerror(errno));
        rc = SX_EIO;
        goto out;
    }
    r.size = (uint64_t)st.st_size;
    if (r.size < SNAP_MIN_SIZE) {
        seterr(err, errlen, "snapshot %s: %llu bytes, shorter than any snapshot (%u)", path,
               (unsigned long long)r.size, SNAP_MIN_SIZE);
        rc = SX_EPROTO;
        goto out;
    }
    if ((r.buf = malloc(SNAP_IO_BUF)) == NULL) {
        seterr(err, errlen, "snapshot %s: out of memory", path);
        rc = SX_ENOMEM;
        goto out;
    }
    r.limit = r.size - LDB_SNAP_TRAILER;
    r.hash_end = r.size - LDB_SNAP_SUM_BYTES;
    crypto_generichash_init(&r.h, NULL, 0, LDB_SNAP_SUM_BYTES);
    if ((rc = walk_header(&r, info)) == 0 &&
        (rc = walk_records(&r, info, forbid, forbid_n, fn, arg, &wb)) == 0)
        rc = walk_trailer(&r, info);
    info->size = r.size;
out:
    free(wb.k);
    free(wb.prev);
    free(wb.v);
    free(r.buf);
    close(r.fd);
    return rc;
}

int ldb_snap_verify(const char *path, ldb_snap_info *info, char *err, size_t errlen)
{
    ldb_snap_info *own = NULL;
    int rc;

    if (info == NULL && (info = own = malloc(sizeof(*own))) == NULL) {
        seterr(err, errlen, "snapshot %s: out of memory", path);
        return SX_ENOMEM;
    }
    rc = snap_walk(path, info, NULL, 0, NULL, NULL, err, errlen);
    free(own);
    return rc;
}

/* ---- install ---- */

typedef struct inst_ctx {
    ldb *d;
    leveldb_writebatch_t *b;
    size_t bytes; /* in b, roughly */
    const uint8_t *marker;
    size_t marker_n;
} inst_ctx;

/* Writes the batch lazily once it holds LDB_SNAP_BATCH bytes (force: any). */
static int inst_flush(inst_ctx *c, bool force)
{
    int rc;

    if (c->bytes == 0 || (!force && c->bytes < LDB_SNAP_BATCH))
        return 0;
    rc = ldb_write_lazy(c->d, c->b);
    leveldb_writebatch_clear(c->b);
    c->bytes = 0;
    return rc;
}

/* ldb_visit: deletes a key of the range (not the marker). Never returns 1
 * (ldb_scan's "stop, no error"): ldb_write_lazy returns 0 or SX_EIO. */
static int inst_delete(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    inst_ctx *c = arg;

    if (key_eq(k, kn, c->marker, c->marker_n))
        return 0;
    leveldb_writebatch_delete(c->b, (const char *)k, kn);
    c->bytes += kn + 16;
    return inst_flush(c, false);
}

/* snap_rec_fn: writes a record. */
static int inst_put(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    inst_ctx *c = arg;

    leveldb_writebatch_put(c->b, (const char *)k, kn, (const char *)v, vn);
    c->bytes += kn + vn + 16;
    return inst_flush(c, false);
}

/* Install's steps after the file was verified into *info. */
static int install_verified(ldb *d, const char *path, const ldb_snap_info *info,
                            const uint8_t *marker, size_t marker_n, ldb_snap_extra_fn extra,
                            void *arg, ldb_snap_info *again, leveldb_writebatch_t *b, char *err,
                            size_t errlen)
{
    inst_ctx c = { .d = d, .b = b, .marker = marker, .marker_n = marker_n };
    unsigned synced = 0;
    int rc;

    leveldb_writebatch_put(b, (const char *)marker, marker_n, "", 0);
    if ((rc = ldb_write_sync(d, b)) != 0) {
        seterr(err, errlen, "install %s: writing the marker failed (leveldb)", path);
        return rc;
    }
    leveldb_writebatch_clear(b);
    rc = ldb_scan_nocache(d, NULL, info->lo, info->lo_n, info->hi, info->hi_n, inst_delete, &c);
    if (rc == 0)
        rc = inst_flush(&c, true);
    if (rc != 0) {
        seterr(err, errlen, "install %s: clearing the range failed (leveldb): %s", path,
               sx_strerror(rc));
        return rc;
    }
    rc = snap_walk(path, again, marker, marker_n, inst_put, &c, err, errlen);
    if (rc == 0)
        rc = inst_flush(&c, true);
    if (rc == 0 && sodium_memcmp(again->sum, info->sum, sizeof(info->sum)) != 0) {
        seterr(err, errlen, "install %s: the file changed while it was installed", path);
        rc = SX_EPROTO;
    }
    if (rc != 0) {
        if (rc == SX_EIO && err != NULL && errlen > 0 && err[0] == '\0')
            seterr(err, errlen, "install %s: writing the records failed (leveldb)", path);
        return rc;
    }
    if ((rc = ldb_sync_logs(d, &synced)) != 0) {
        seterr(err, errlen, "install %s: syncing leveldb's logs failed", path);
        return rc;
    }
    leveldb_writebatch_clear(b);
    leveldb_writebatch_delete(b, (const char *)marker, marker_n);
    if (extra != NULL && (rc = extra(arg, b, info)) != 0) {
        seterr(err, errlen, "install %s: the caller's last writes failed: %s", path,
               sx_strerror(rc));
        return rc;
    }
    if ((rc = ldb_write_sync(d, b)) != 0) {
        seterr(err, errlen, "install %s: the last batch failed (leveldb)", path);
        return rc;
    }
    return 0;
}

int ldb_snap_install(ldb *d, const char *path, const void *marker, size_t marker_n,
                     ldb_snap_extra_fn extra, void *arg, ldb_snap_info *info, char *err,
                     size_t errlen)
{
    ldb_snap_info *v = NULL, *again = NULL;
    leveldb_writebatch_t *b = NULL;
    int rc;

    if (d == NULL || path == NULL || marker == NULL || marker_n == 0) {
        seterr(err, errlen, "install: bad arguments (a database, a path and a marker key)");
        return SX_EINVAL;
    }
    if ((v = malloc(sizeof(*v))) == NULL || (again = malloc(sizeof(*again))) == NULL ||
        (b = leveldb_writebatch_create()) == NULL) {
        seterr(err, errlen, "install %s: out of memory", path);
        rc = SX_ENOMEM;
        goto out;
    }
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    rc = snap_walk(path, v, marker, marker_n, NULL, NULL, err, errlen);
    if (rc == 0)
        rc = install_verified(d, path, v, marker, marker_n, extra, arg, again, b, err, errlen);
    if (rc == 0 && info != NULL)
        *info = *v;
out:
    if (b != NULL)
        leveldb_writebatch_destroy(b);
    free(again);
    free(v);
    return rc;
}

int ldb_snap_marker_present(ldb *d, const void *key, size_t n, bool *present)
{
    uint8_t *v = NULL;
    size_t vn = 0;
    int rc = ldb_get(d, key, n, &v, &vn);

    *present = rc == 0;
    free(v);
    return rc == SX_ENOTFOUND ? 0 : rc;
}
