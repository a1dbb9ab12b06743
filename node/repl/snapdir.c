/*
 * snapdir.c — the snapshot files of one replicated key range (snapdir.h).
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hash.h"
#include "ldb_snap.h"
#include "log.h"
#include "snapdir.h"
#include "sx_errors.h"

/* A wipe's deletions are written once they pass this many key bytes. */
#define WIPE_BATCH_BYTES (4u << 20)

static void snap_path(const snapdir *s, uint64_t index, char *out, size_t n)
{
    snprintf(out, n, "%s/snap-%llu", s->dir, (unsigned long long)index);
}

static void stage_path(const snapdir *s, char *out, size_t n)
{
    snprintf(out, n, "%s/stage", s->dir);
}

/* Removes every snap-<N> file but snap-1, keep and prev. */
static void prune(snapdir *s, uint64_t keep, uint64_t prev)
{
    DIR *d = opendir(s->dir);
    struct dirent *e;
    if (d == NULL)
        return;
    while ((e = readdir(d)) != NULL) {
        unsigned long long n;
        char tail;
        if (sscanf(e->d_name, "snap-%llu%c", &n, &tail) != 1 || n == 1 || n == keep || n == prev)
            continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", s->dir, e->d_name);
        unlink(p);
    }
    closedir(d);
}

/* The newest snap-<N> file present (1 when only the empty one). */
static uint64_t newest(const snapdir *s)
{
    DIR *d = opendir(s->dir);
    struct dirent *e;
    uint64_t best = 1;
    if (d == NULL)
        return best;
    while ((e = readdir(d)) != NULL) {
        unsigned long long n;
        char tail;
        if (sscanf(e->d_name, "snap-%llu%c", &n, &tail) == 1 && n > best)
            best = n;
    }
    closedir(d);
    return best;
}

int snapdir_applied(const snapdir *s, uint64_t *applied)
{
    uint8_t *v = NULL;
    size_t vn = 0;
    *applied = 0;
    int rc = ldb_get(s->db, s->akey, s->akey_n, &v, &vn);
    if (rc == SX_ENOTFOUND)
        return 0;
    if (rc != 0)
        return rc;
    if (vn != 8) {
        free(v);
        LOG_ERROR("%s: its applied index record has %zu bytes, not 8", s->what, vn);
        return SX_EIO;
    }
    *applied = be_get64(v);
    free(v);
    return 0;
}

void snapdir_put_applied(const snapdir *s, leveldb_writebatch_t *b, uint64_t applied)
{
    uint8_t be[8];
    be_put64(be, applied);
    leveldb_writebatch_put(b, (const char *)s->akey, s->akey_n, (const char *)be, 8);
}

/* ---- wipe ---- */

typedef struct wipe_st {
    snapdir *s;
    leveldb_writebatch_t *b;
    size_t bytes;
    uint64_t keys;
    int rc;
} wipe_st;

static int wipe_visit(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    wipe_st *w = arg;
    (void)v;
    (void)vn;
    leveldb_writebatch_delete(w->b, (const char *)k, kn);
    w->bytes += kn + 16;
    w->keys++;
    if (w->bytes >= WIPE_BATCH_BYTES) {
        int rc = ldb_write_lazy(w->s->db, w->b);
        leveldb_writebatch_clear(w->b);
        w->bytes = 0;
        if (rc != 0)
            return rc;
    }
    return 0;
}

int snapdir_wipe(snapdir *s)
{
    wipe_st w = { s, leveldb_writebatch_create(), 0, 0, 0 };
    if (w.b == NULL)
        return SX_ENOMEM;
    int rc = ldb_scan_nocache(s->db, NULL, s->lo, s->lo_n, s->hi, s->hi_n, wipe_visit, &w);
    if (rc == 0) /* the last deletions; syncs the lazy ones too */
        rc = ldb_write_sync(s->db, w.b);
    unsigned logs = 0;
    if (rc == 0)
        rc = ldb_sync_logs(s->db, &logs);
    leveldb_writebatch_destroy(w.b);
    if (rc != 0)
        LOG_ERROR("%s: cannot empty its data: %s", s->what, sx_strerror(rc));
    return rc;
}

/* ---- open ---- */

/* True (in *any) when the range holds a key other than the marker. */
static int any_visit(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    (void)k;
    (void)kn;
    (void)v;
    (void)vn;
    *(bool *)arg = true;
    return 1;
}

static bool fits(size_t n)
{
    return n <= SNAPDIR_KEY_MAX;
}

int snapdir_open(snapdir *s, const char *dir, const char *what, ldb *db, const void *lo,
                 size_t lo_n, const void *hi, size_t hi_n, const void *marker, size_t marker_n,
                 const void *akey, size_t akey_n, bool *wiped, uint64_t *boot_size,
                 uint64_t *applied)
{
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    *wiped = false;
    *boot_size = *applied = 0;
    if (!fits(lo_n) || !fits(hi_n) || !fits(marker_n) || !fits(akey_n) || marker_n == 0 ||
        akey_n == 0 || strlen(dir) >= sizeof s->dir)
        return SX_EINVAL;
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    snprintf(s->what, sizeof s->what, "%s", what);
    s->db = db;
    if (lo_n > 0)
        memcpy(s->lo, lo, lo_n);
    if (hi_n > 0)
        memcpy(s->hi, hi, hi_n);
    memcpy(s->marker, marker, marker_n);
    memcpy(s->akey, akey, akey_n);
    s->lo_n = lo_n;
    s->hi_n = hi_n;
    s->marker_n = marker_n;
    s->akey_n = akey_n;
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        LOG_ERROR("%s: cannot make %s: %s", what, dir, strerror(errno));
        return SX_EIO;
    }
    bool installing = false;
    if (ldb_snap_marker_present(db, marker, marker_n, &installing) != 0)
        return SX_EIO;
    if (installing) {
        /* the state is garbage: the empty state is what the bootstrap
         * snapshot is, and a later snapshot is installed again from its
         * file (snap-<N>) by the host */
        LOG_WARN("%s: a snapshot install was interrupted: emptying its data to install it again",
                 what);
        if (snapdir_wipe(s) != 0)
            return SX_EIO;
        *wiped = true;
    }
    /* a staged snapshot stays: its meta may be durable already (a crash
     * between the round's write and the install), and snapdir_install
     * finds it, or drops it when it is not the snapshot to install */
    int rc = snapdir_applied(s, applied);
    if (rc != 0)
        return rc;
    char path[4096], err[256];
    snap_path(s, 1, path, sizeof path);
    struct stat st;
    if (stat(path, &st) == 0) {
        *boot_size = (uint64_t)st.st_size;
        s->newest = newest(s);
        return 0;
    }
    bool any = false;
    rc = ldb_scan(db, NULL, s->lo, s->lo_n, s->hi, s->hi_n, false, any_visit, &any);
    if (rc != 0)
        return rc;
    if (any || *applied != 0) {
        LOG_ERROR("%s: %s is missing but its data is not empty: this data was not made by a "
                  "replica of a replicated group (a single-replica partition cannot be turned "
                  "into a replicated one in place)",
                  what, path);
        return SX_EIO;
    }
    /* a new replica: its range is still empty, the bootstrap state */
    if (ldb_snap_make(db, NULL, s->lo, s->lo_n, s->hi, s->hi_n, 1, NULL, 0, path, boot_size, err,
                      sizeof err) != 0) {
        LOG_ERROR("%s: cannot make its empty snapshot: %s", what, err);
        return SX_EIO;
    }
    s->newest = 1;
    return 0;
}

/* ---- the snapshot functions ---- */

int snapdir_make(snapdir *s, uint64_t applied, uint64_t *index, uint64_t *size)
{
    char path[4096], err[256];
    snap_path(s, applied, path, sizeof path);
    if (ldb_snap_make(s->db, NULL, s->lo, s->lo_n, s->hi, s->hi_n, applied, NULL, 0, path, size,
                      err, sizeof err) != 0) {
        LOG_WARN("%s: no snapshot at %llu: %s", s->what, (unsigned long long)applied, err);
        return -1;
    }
    *index = applied;
    prune(s, applied, s->newest);
    s->newest = applied;
    return 0;
}

static void *bg_main(void *arg)
{
    snapdir *s = arg;
    char path[4096], err[256];
    uint64_t size = 0;

    snap_path(s, s->job_index, path, sizeof path);
    int rc = ldb_snap_make(s->db, s->job_snap, s->lo, s->lo_n, s->hi, s->hi_n, s->job_index, NULL,
                           0, path, &size, err, sizeof err);
    if (rc != 0)
        LOG_WARN("%s: no snapshot at %llu: %s", s->what, (unsigned long long)s->job_index, err);
    leveldb_release_snapshot(s->db->db, s->job_snap);
    pthread_mutex_lock(&s->mu);
    s->job_rc = rc;
    s->job_size = size;
    s->done = true;
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

int snapdir_make_bg(snapdir *s, uint64_t applied, uint64_t *index, uint64_t *size)
{
    pthread_mutex_lock(&s->mu);
    bool busy = s->busy, done = s->done;
    pthread_mutex_unlock(&s->mu);
    if (busy && !done)
        return -1;
    if (busy) { /* finished */
        pthread_join(s->th, NULL);
        s->busy = s->done = false;
        if (s->job_rc != 0)
            return -1;
        *index = s->job_index;
        *size = s->job_size;
        prune(s, s->job_index, s->newest);
        s->newest = s->job_index;
        return 0;
    }
    s->job_snap = leveldb_create_snapshot(s->db->db);
    s->job_index = applied;
    s->busy = true;
    if (pthread_create(&s->th, NULL, bg_main, s) != 0) {
        leveldb_release_snapshot(s->db->db, s->job_snap);
        s->busy = false;
        LOG_WARN("%s: no thread to make a snapshot", s->what);
    }
    return -1;
}

void snapdir_close(snapdir *s)
{
    if (s == NULL || s->dir[0] == '\0')
        return;
    if (s->busy)
        pthread_join(s->th, NULL);
    s->busy = s->done = false;
    pthread_mutex_destroy(&s->mu);
    s->dir[0] = '\0';
}

int snapdir_read(snapdir *s, uint64_t index, uint64_t off, uint8_t *buf, uint32_t len)
{
    char path[4096];
    size_t got = 0;
    snap_path(s, index, path, sizeof path);
    return ldb_snap_read(path, off, buf, len, &got, NULL, 0) == 0 && got == len ? 0 : -1;
}

int snapdir_stage(snapdir *s, uint64_t off, const uint8_t *p, uint32_t len)
{
    char path[4096], err[256];
    uint64_t staged;
    stage_path(s, path, sizeof path);
    if (ldb_snap_stage_write(path, off, p, len, &staged, err, sizeof err) != 0 ||
        ldb_snap_stage_sync(path, err, sizeof err) != 0) {
        LOG_WARN("%s: cannot stage a snapshot chunk: %s", s->what, err);
        return -1;
    }
    return 0;
}

/* Checks the snapshot file at path against meta: well formed, its
 * checksum, its size, the index it was taken at and its range. */
static int check_file(const snapdir *s, const char *path, const raft_snap_meta *m)
{
    char err[256];
    ldb_snap_info *info = malloc(sizeof *info);
    if (info == NULL)
        return -1;
    int rc = ldb_snap_verify(path, info, err, sizeof err);
    if (rc == 0 && (info->applied != m->index || info->size != m->size)) {
        snprintf(err, sizeof err, "taken at %llu, %llu bytes; the leader's is at %llu, %llu bytes",
                 (unsigned long long)info->applied, (unsigned long long)info->size,
                 (unsigned long long)m->index, (unsigned long long)m->size);
        rc = SX_EPROTO;
    }
    if (rc == 0 &&
        (info->lo_n != s->lo_n || info->hi_n != s->hi_n || memcmp(info->lo, s->lo, s->lo_n) != 0 ||
         memcmp(info->hi, s->hi, s->hi_n) != 0)) {
        snprintf(err, sizeof err, "it holds another key range than this group's");
        rc = SX_EPROTO;
    }
    free(info);
    if (rc != 0)
        LOG_ERROR("%s: snapshot %s refused: %s", s->what, path, err);
    return rc == 0 ? 0 : -1;
}

int snapdir_verify(snapdir *s, const raft_snap_meta *m)
{
    char stage[4096];
    stage_path(s, stage, sizeof stage);
    return check_file(s, stage, m);
}

/* The applied index goes with the installed state, in its last batch. */
static int install_extra(void *arg, leveldb_writebatch_t *b, const ldb_snap_info *info)
{
    snapdir_put_applied(arg, b, info->applied);
    return 0;
}

int snapdir_install(snapdir *s, const raft_snap_meta *m)
{
    char path[4096], stage[4096], err[256];
    snap_path(s, m->index, path, sizeof path);
    stage_path(s, stage, sizeof stage);
    /* a snapshot received becomes snap-<index> first (durably), so that a
     * crash at any later point finds it there, installed or not */
    if (access(stage, F_OK) == 0) {
        if (check_file(s, stage, m) != 0) {
            unlink(stage); /* another, abandoned transfer's: not this snapshot */
        } else if (rename(stage, path) != 0 || ldb_sync_parent(path) != 0) {
            LOG_ERROR("%s: cannot keep the received snapshot as %s: %s", s->what, path,
                      strerror(errno));
            return -1;
        }
    }
    if (check_file(s, path, m) != 0)
        return -1;
    ldb_snap_info *info = malloc(sizeof *info);
    if (info == NULL)
        return -1;
    int rc = ldb_snap_install(s->db, path, s->marker, s->marker_n, install_extra, s, info, err,
                              sizeof err);
    free(info);
    if (rc != 0) {
        LOG_ERROR("%s: cannot install the snapshot at %llu: %s", s->what,
                  (unsigned long long)m->index, err);
        return -1;
    }
    prune(s, m->index, s->newest);
    s->newest = m->index;
    LOG_INFO("%s: installed the snapshot at %llu", s->what, (unsigned long long)m->index);
    return 0;
}
