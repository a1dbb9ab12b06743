/*
 * catalog_sm_test.c — the catalog partition as a Raft state machine
 * (node/catalog/catalog_sm.c, catp_apply_entry): entries apply with their
 * proposer's reply (a refused change is applied as a refusal), no-op
 * entries move the applied index, the applied index survives a reopen; a
 * snapshot made on one replica, streamed in small chunks through the
 * staging file, installs on an empty replica with the same catalog, the
 * same remembered request ids and the snapshot's index applied; a bad
 * chunk order is refused; an install interrupted before its end leaves the
 * replica reporting nothing applied (to be replaced again), and one
 * interrupted at the bootstrap snapshot empties the catalog; a staged
 * snapshot of another index or size is refused before its meta is
 * persisted, a stale staging file is passed over; reset empties it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "catalog_part.h"
#include "catalog_sm.h"
#include "check.h"
#include "ldb.h"
#include "ldb_snap.h"
#include "msg.h"
#include "scratch.h"
#include "sx_errors.h"

static cfg_cluster cfg;
static cfg_node node;
static cfg_part part;

static mp_span S(const char *s)
{
    mp_span v = { (const uint8_t *)s, strlen(s) };
    return v;
}

/* The entry a leader proposes for "create table NAME" (request id rid). */
static uint8_t *create_entry(const char *name, const char *rid, size_t *n)
{
    msg_CAT_UPDATE_req r;
    memset(&r, 0, sizeof r);
    r.op = CATOP_CREATE_TABLE;
    r.table = S(name);
    r.pk = S("id");
    if (rid)
        r.rid = S(rid);
    mp_buf b;
    mp_buf_init(&b);
    mp_put_raw(&b, "\0", 1); /* the type byte, set below */
    if (msg_encode_req(MSG_CAT_UPDATE, &r, &b) != 0) {
        mp_buf_free(&b);
        return NULL;
    }
    uint8_t *p;
    if (mp_buf_take(&b, &p, n) != 0)
        return NULL;
    p[0] = (uint8_t)MSG_CAT_UPDATE;
    return p;
}

/* Applies a create entry at index; returns the reply's error (0: made)
 * and its version. */
static int apply_create(catsm *sm, uint64_t index, const char *name, const char *rid,
                        uint64_t *version)
{
    size_t n;
    uint8_t *e = create_entry(name, rid, &n);
    if (e == NULL)
        return -1;
    raft_entry re = { 1, index, RAFT_ENTRY_NORMAL, (uint32_t)n, e };
    rhost_result res = { 0 };
    int rc = catsm_ops.apply(sm, &re, &res);
    free(e);
    if (rc != 0)
        return -1;
    msg_CAT_UPDATE_rep rep;
    int err = msg_decode_rep(MSG_CAT_UPDATE, res.reply, res.reply_len, &rep, NULL, 0);
    *version = err == 0 ? rep.version : 0;
    msg_free_rep(MSG_CAT_UPDATE, &rep);
    free(res.reply);
    return err;
}

typedef struct replica {
    catp *c;
    catsm *sm;
    uint64_t boot, applied;
    char dir[512], snaps[600];
} replica;

static int open_replica(replica *r, const char *base, const char *name)
{
    snprintf(r->dir, sizeof r->dir, "%s/%s", base, name);
    snprintf(r->snaps, sizeof r->snaps, "%s.raft", r->dir);
    if (catp_open(r->dir, &cfg, &r->c) != 0)
        return -1;
    return catsm_open(r->c, r->snaps, &r->sm, &r->boot, &r->applied);
}

static void close_replica(replica *r)
{
    catsm_close(r->sm);
    catp_close(r->c);
    r->sm = NULL;
    r->c = NULL;
}

static bool run(const char *dir)
{
    replica a, b;
    uint64_t v = 0;
    CHECK_INT(open_replica(&a, dir, "a"), 0);
    CHECK(a.boot > 0);       /* the empty-state snapshot exists */
    CHECK_INT(a.applied, 0); /* nothing applied yet */
    /* entries 2.. (1 is the bootstrap snapshot) */
    raft_entry noop = { 1, 2, RAFT_ENTRY_NOOP, 0, NULL };
    rhost_result res = { 0 };
    CHECK_INT(catsm_ops.apply(a.sm, &noop, &res), 0);
    CHECK_INT(catp_applied(a.c), 2);
    CHECK_INT(apply_create(a.sm, 3, "t1", "rid-000000000001", &v), 0);
    CHECK_INT(v, 1);
    /* refused (exists): applied as a refusal, the index moves on */
    CHECK_INT(apply_create(a.sm, 4, "t1", NULL, &v), SX_EEXIST);
    CHECK_INT(catp_applied(a.c), 4);
    CHECK_INT(apply_create(a.sm, 5, "t2", NULL, &v), 0);
    CHECK_INT(v, 2);
    /* a retry of the first change (its request id): its version, once */
    CHECK_INT(apply_create(a.sm, 6, "t1", "rid-000000000001", &v), 0);
    CHECK_INT(v, 1);
    CHECK_INT(catp_version(a.c), 2);

    /* the applied index is the partition's, across a reopen */
    close_replica(&a);
    CHECK_INT(open_replica(&a, dir, "a"), 0);
    CHECK_INT(a.applied, 6);
    CHECK_INT(catp_version(a.c), 2);

    /* a snapshot, streamed in chunks of 7 bytes to an empty replica */
    uint64_t idx = 0, size = 0;
    CHECK_INT(catsm_ops.snap_make(a.sm, &idx, &size), 0);
    CHECK_INT(idx, 6);
    CHECK(size > 0);
    CHECK_INT(open_replica(&b, dir, "b"), 0);
    uint8_t buf[7];
    for (uint64_t off = 0; off < size; off += sizeof buf) {
        uint32_t len = (uint32_t)(size - off < sizeof buf ? size - off : sizeof buf);
        CHECK_INT(catsm_ops.snap_read(a.sm, idx, off, buf, len), 0);
        CHECK_INT(catsm_ops.snap_stage(b.sm, idx, off, buf, len), 0);
    }
    /* a chunk that does not continue the staged bytes is refused */
    CHECK(catsm_ops.snap_stage(b.sm, idx, size + 10, buf, 1) != 0);
    /* a snapshot no longer held cannot be read */
    CHECK(catsm_ops.snap_read(a.sm, 5, 0, buf, 1) != 0);
    raft_snap_meta m;
    memset(&m, 0, sizeof m);
    m.index = idx;
    m.term = 1;
    m.size = size;
    CHECK_INT(catsm_ops.snap_install(b.sm, &m), 0);
    CHECK_INT(catp_applied(b.c), 6);
    CHECK_INT(catp_version(b.c), 2);
    cat_catalog *ca = catp_snapshot(a.c), *cb = catp_snapshot(b.c);
    CHECK(ca && cb && ca->ntables == cb->ntables && ca->ntables == 2);
    cat_free(ca);
    cat_free(cb);
    /* the request ids came along: a retry on b answers the old version */
    CHECK_INT(apply_create(b.sm, 7, "t1", "rid-000000000001", &v), 0);
    CHECK_INT(v, 1);
    /* and b goes on applying where the snapshot ended */
    CHECK_INT(apply_create(b.sm, 8, "t3", NULL, &v), 0);
    CHECK_INT(v, 3);
    close_replica(&b);
    CHECK_INT(open_replica(&b, dir, "b"), 0);
    CHECK_INT(b.applied, 8);
    CHECK_INT(catp_version(b.c), 3);

    /* an install that stopped before its end: the marker stays, and the
     * replica reports nothing applied (its state is to be replaced) */
    {
        leveldb_writebatch_t *wb = leveldb_writebatch_create();
        leveldb_writebatch_put(wb, "raft_installing", strlen("raft_installing"), "", 0);
        CHECK_INT(ldb_write_sync(catp_db(b.c), wb), 0);
        leveldb_writebatch_destroy(wb);
        close_replica(&b);
        CHECK_INT(open_replica(&b, dir, "b"), 0);
        CHECK_INT(b.applied, 0);
        /* the host then installs the newest snapshot it has again */
        memset(&m, 0, sizeof m);
        m.index = 6;
        m.term = 1;
        m.size = size;
        CHECK_INT(catsm_ops.snap_install(b.sm, &m), 0);
        CHECK_INT(catp_applied(b.c), 6);
        close_replica(&b);
        CHECK_INT(open_replica(&b, dir, "b"), 0);
        CHECK_INT(b.applied, 6);
    }
    /* a staged snapshot is checked against the meta before its round
     * persists it: another index or size is refused */
    {
        replica c2;
        CHECK_INT(open_replica(&c2, dir, "c"), 0);
        for (uint64_t off = 0; off < size; off += sizeof buf) {
            uint32_t len = (uint32_t)(size - off < sizeof buf ? size - off : sizeof buf);
            CHECK_INT(catsm_ops.snap_read(a.sm, 6, off, buf, len), 0);
            CHECK_INT(catsm_ops.snap_stage(c2.sm, 6, off, buf, len), 0);
        }
        memset(&m, 0, sizeof m);
        m.index = 7; /* not the index the file was taken at */
        m.term = 1;
        m.size = size;
        CHECK(catsm_ops.snap_verify(c2.sm, &m) != 0);
        m.index = 6;
        m.size = size + 1;
        CHECK(catsm_ops.snap_verify(c2.sm, &m) != 0);
        m.size = size;
        CHECK_INT(catsm_ops.snap_verify(c2.sm, &m), 0);
        CHECK_INT(catsm_ops.snap_install(c2.sm, &m), 0);
        CHECK_INT(catp_version(c2.c), 2);
        /* a stale stage (another transfer's) left beside snap-6: the
         * install of 6 after a restart ignores it */
        char stage[700];
        snprintf(stage, sizeof stage, "%s/stage", c2.snaps);
        FILE *f = fopen(stage, "w");
        CHECK(f != NULL);
        if (f) {
            fputs("not a snapshot", f);
            fclose(f);
        }
        CHECK_INT(catsm_ops.snap_install(c2.sm, &m), 0);
        CHECK_INT(catp_applied(c2.c), 6);
        /* reset: the empty state, nothing applied */
        CHECK_INT(catsm_ops.reset(c2.sm), 0);
        CHECK_INT(catp_applied(c2.c), 0);
        CHECK_INT(catp_version(c2.c), 0);
        close_replica(&c2);
    }
    /* an install interrupted on a replica at the bootstrap snapshot: the
     * catalog is emptied at the next start (the empty state is index 1's) */
    {
        replica d;
        CHECK_INT(open_replica(&d, dir, "d"), 0);
        CHECK_INT(apply_create(d.sm, 2, "junk", NULL, &v), 0);
        leveldb_writebatch_t *wb = leveldb_writebatch_create();
        leveldb_writebatch_put(wb, "raft_installing", strlen("raft_installing"), "", 0);
        CHECK_INT(ldb_write_sync(catp_db(d.c), wb), 0);
        leveldb_writebatch_destroy(wb);
        close_replica(&d);
        CHECK_INT(open_replica(&d, dir, "d"), 0);
        CHECK_INT(d.applied, 0);
        CHECK_INT(catp_version(d.c), 0);
        bool marker = true;
        CHECK_INT(ldb_snap_marker_present(catp_db(d.c), "raft_installing", 15, &marker), 0);
        CHECK(!marker);
        close_replica(&d);
    }
    close_replica(&a);
    close_replica(&b);
    return true;
}

int main(int argc, char **argv)
{
    memset(&cfg, 0, sizeof cfg);
    memset(&node, 0, sizeof node);
    memset(&part, 0, sizeof part);
    node.name = "s1";
    node.url = "tcp://127.0.0.1:1";
    node.role = SX_ROLE_STORAGE;
    part.id = 1;
    part.hhi = UINT64_MAX;
    part.nrep = 1;
    cfg.cluster = "test";
    cfg.nnodes = 1;
    cfg.nodes = &node;
    cfg.catalog_node = 0;
    cfg.nstorage = 1;
    cfg.storage = &part;
    if (!scratch_run(argc, argv, "sx-catsm", run))
        return 1;
    return CHECK_DONE();
}
