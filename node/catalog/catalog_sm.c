/*
 * catalog_sm.c — the catalog partition as a Raft state machine
 * (catalog_sm.h).
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "catalog_sm.h"
#include "ldb_snap.h"
#include "log.h"
#include "msg.h"
#include "sx_errors.h"

#define CATSM_MARKER "raft_installing"

struct catsm {
    catp *c;
    char dir[3072];
    uint64_t snap_index; /* newest snapshot file (DIR/snap-<N>); 1: only the empty one */
};

static void snap_path(const catsm *s, uint64_t index, char *out, size_t n)
{
    snprintf(out, n, "%s/snap-%llu", s->dir, (unsigned long long)index);
}

static void stage_path(const catsm *s, char *out, size_t n)
{
    snprintf(out, n, "%s/stage", s->dir);
}

/* Removes every snap-<N> file but snap-1, keep and prev: the newest
 * snapshot's meta is persisted by the round after the one that made it,
 * so until then the previous one may be the durable meta's. */
static void prune(catsm *s, uint64_t keep, uint64_t prev)
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
static uint64_t newest(const catsm *s)
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

static int apply(void *sm, const raft_entry *e, rhost_result *res)
{
    catsm *s = sm;
    if (e->type != RAFT_ENTRY_NORMAL)
        return catp_mark_applied(s->c, e->index) == 0 ? 0 : -1;
    mp_buf b;
    mp_buf_init(&b);
    int rc = catp_apply_entry(s->c, e->index, e->data, e->len, &b);
    if (rc != 0) {
        mp_buf_free(&b);
        LOG_ERROR("catalog replica: cannot apply entry %llu: %s", (unsigned long long)e->index,
                  sx_strerror(rc));
        return -1;
    }
    if (mp_buf_take(&b, &res->reply, &res->reply_len) != 0)
        res->reply = NULL; /* the proposer then answers "out of memory" */
    mp_buf_free(&b);
    return 0;
}

static int snap_make(void *sm, uint64_t *index, uint64_t *size)
{
    catsm *s = sm;
    char path[4096], err[256];
    uint64_t applied = catp_applied(s->c);
    snap_path(s, applied, path, sizeof path);
    int rc = ldb_snap_make(catp_db(s->c), NULL, NULL, 0, NULL, 0, applied, NULL, 0, path, size, err,
                           sizeof err);
    if (rc != 0) {
        LOG_WARN("catalog replica: no snapshot at %llu: %s", (unsigned long long)applied, err);
        return -1;
    }
    *index = applied;
    prune(s, applied, s->snap_index);
    s->snap_index = applied;
    return 0;
}

static int snap_read(void *sm, uint64_t index, uint64_t off, uint8_t *buf, uint32_t len)
{
    catsm *s = sm;
    char path[4096];
    size_t got = 0;
    snap_path(s, index, path, sizeof path);
    return ldb_snap_read(path, off, buf, len, &got, NULL, 0) == 0 && got == len ? 0 : -1;
}

static int snap_stage(void *sm, uint64_t index, uint64_t off, const uint8_t *p, uint32_t len)
{
    catsm *s = sm;
    char path[4096], err[256];
    uint64_t staged;
    (void)index;
    stage_path(s, path, sizeof path);
    if (ldb_snap_stage_write(path, off, p, len, &staged, err, sizeof err) != 0 ||
        ldb_snap_stage_sync(path, err, sizeof err) != 0) {
        LOG_WARN("catalog replica: cannot stage a snapshot chunk: %s", err);
        return -1;
    }
    return 0;
}

/* The applied index goes with the installed state, in its last batch. */
static int install_extra(void *arg, leveldb_writebatch_t *b, const ldb_snap_info *info)
{
    (void)info;
    const uint64_t *index = arg;
    uint8_t be[8];
    size_t kn;
    const char *k = catp_applied_key(&kn);
    for (int i = 0; i < 8; i++)
        be[i] = (uint8_t)(*index >> (56 - 8 * i));
    leveldb_writebatch_put(b, k, kn, (const char *)be, 8);
    return 0;
}

/* Checks the snapshot file at path against meta: well formed, its
 * checksum, its size and the index it was taken at. */
static int check_file(const char *path, const raft_snap_meta *m)
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
    free(info);
    if (rc != 0)
        LOG_ERROR("catalog replica: snapshot %s refused: %s", path, err);
    return rc == 0 ? 0 : -1;
}

static int snap_verify(void *sm, const raft_snap_meta *m)
{
    catsm *s = sm;
    char stage[4096];
    stage_path(s, stage, sizeof stage);
    return check_file(stage, m);
}

static int snap_install(void *sm, const raft_snap_meta *m)
{
    catsm *s = sm;
    char path[4096], stage[4096], err[256];
    uint64_t index = m->index;
    snap_path(s, index, path, sizeof path);
    stage_path(s, stage, sizeof stage);
    /* a snapshot received becomes snap-<index> first (durably), so that a
     * crash at any later point finds it there, installed or not */
    if (access(stage, F_OK) == 0) {
        if (check_file(stage, m) != 0) {
            unlink(stage); /* another, abandoned transfer's: not this snapshot */
        } else if (rename(stage, path) != 0 || ldb_sync_parent(path) != 0) {
            LOG_ERROR("catalog replica: cannot keep the received snapshot as %s: %s", path,
                      strerror(errno));
            return -1;
        }
    }
    if (check_file(path, m) != 0)
        return -1;
    ldb_snap_info *info = malloc(sizeof *info);
    if (info == NULL)
        return -1;
    int rc = ldb_snap_install(catp_db(s->c), path, CATSM_MARKER, strlen(CATSM_MARKER),
                              install_extra, &index, info, err, sizeof err);
    free(info);
    if (rc != 0) {
        LOG_ERROR("catalog replica: cannot install the snapshot at %llu: %s",
                  (unsigned long long)index, err);
        return -1;
    }
    if ((rc = catp_reload(s->c)) != 0) {
        LOG_ERROR("catalog replica: the installed snapshot does not load: %s", sx_strerror(rc));
        return -1;
    }
    prune(s, index, s->snap_index);
    s->snap_index = index;
    LOG_INFO("catalog replica: installed the snapshot at %llu", (unsigned long long)index);
    return 0;
}

/* Deletes every key of the catalog's leveldb (synced) and reloads: the
 * empty state. */
static int collect_key(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    (void)v;
    (void)vn;
    leveldb_writebatch_delete(arg, (const char *)k, kn);
    return 0;
}

static int wipe(catp *c)
{
    leveldb_writebatch_t *wb = leveldb_writebatch_create();
    if (wb == NULL)
        return SX_ENOMEM;
    int rc = ldb_scan(catp_db(c), NULL, NULL, 0, NULL, 0, false, collect_key, wb);
    if (rc == 0)
        rc = ldb_write_sync(catp_db(c), wb);
    leveldb_writebatch_destroy(wb);
    if (rc == 0)
        rc = catp_reload(c);
    return rc;
}

static int reset(void *sm)
{
    catsm *s = sm;
    int rc = wipe(s->c);
    if (rc != 0)
        LOG_ERROR("catalog replica: cannot empty the catalog: %s", sx_strerror(rc));
    return rc == 0 ? 0 : -1;
}

const rhost_sm_ops catsm_ops = { apply,        snap_make,   snap_read, snap_stage,
                                 snap_install, snap_verify, reset };

int catsm_open(catp *c, const char *dir, catsm **out, uint64_t *boot_size, uint64_t *applied)
{
    *out = NULL;
    catsm *s = calloc(1, sizeof *s);
    if (s == NULL)
        return SX_ENOMEM;
    s->c = c;
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        LOG_ERROR("cannot make %s: %s", dir, strerror(errno));
        free(s);
        return SX_EIO;
    }
    char path[4096], err[256];
    snap_path(s, 1, path, sizeof path);
    bool installing = false;
    if (ldb_snap_marker_present(catp_db(c), CATSM_MARKER, strlen(CATSM_MARKER), &installing) != 0) {
        free(s);
        return SX_EIO;
    }
    if (installing) {
        /* an install stopped midway: the state is garbage; the empty state
         * is what the bootstrap snapshot is, and a later snapshot is
         * installed again from its file (snap-<N>) by the host */
        LOG_WARN("catalog replica: a snapshot install was interrupted: emptying the catalog to "
                 "install it again");
        if (wipe(c) != 0) {
            free(s);
            return SX_EIO;
        }
    }
    /* a staged snapshot stays: its meta may be durable already (a crash
     * between the round's write and the install), and snap_install finds
     * it, or drops it when it is not the snapshot to install */
    *applied = catp_applied(c);
    if (access(path, F_OK) != 0) {
        if (catp_applied(c) != 0 || catp_version(c) != 0) {
            LOG_ERROR("catalog replica: %s is missing but the catalog holds data: this folder "
                      "was not made by a replica of a replicated catalog",
                      path);
            free(s);
            return SX_EIO;
        }
        /* a new replica: its leveldb is still empty, the bootstrap state */
        if (ldb_snap_make(catp_db(c), NULL, NULL, 0, NULL, 0, 1, NULL, 0, path, boot_size, err,
                          sizeof err) != 0) {
            LOG_ERROR("catalog replica: cannot make its empty snapshot: %s", err);
            free(s);
            return SX_EIO;
        }
    } else {
        struct stat st;
        if (stat(path, &st) != 0) {
            free(s);
            return SX_EIO;
        }
        *boot_size = (uint64_t)st.st_size;
    }
    s->snap_index = newest(s);
    *out = s;
    return 0;
}

void catsm_close(catsm *s)
{
    free(s);
}
