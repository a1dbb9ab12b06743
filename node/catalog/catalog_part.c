/*
 * catalog_part.c — the catalog partition (see catalog_part.h).
 *
 * The whole catalog is one msgpack value (cat_encode) stored under one key
 * in its own leveldb. Every mutation (CAT_UPDATE, CAT_BACKFILLED) goes
 * through catp_apply: decode the request frame, mutate a clone of the
 * current catalog, encode it, write it with a synced batch, and only then
 * swap it in and reply. The request frame is the unit a replicated log
 * would later carry: apply(frame) is deterministic given the catalog.
 *
 * A CAT_UPDATE may carry its client's request id (rid): the ids of the last
 * CATP_RIDS changes made, with the version each made, are stored beside
 * the catalog (key "rids", written in the change's own batch), and a
 * request whose id is among them is answered with that version instead of
 * being applied again: a client that lost the reply (its router died, the
 * connection broke) and asks again learns that its change was made. Each
 * id keeps a hash of the change it asked for: the same id with another
 * change (a client's bug) is refused, not answered as made.
 *
 * Locking: one mutex (catp.mu) guards cat, enc/enc_n, the ids and
 * serialises mutations (including their synced write); catalog changes
 * are rare.
 */
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "catalog_part.h"
#include "hash.h"
#include "ldb.h"
#include "log.h"
#include "net.h"
#include "sx_errors.h"

#define CATP_KEY "catalog"
#define CATP_RIDS_KEY "rids"
#define CATP_APPLIED_KEY "raft_applied" /* replicated: the Raft index applied */
#define CATP_RIDS 256                   /* request ids remembered, the newest */
#define CATP_RID_BYTES 16
#define CATP_RID_SUM 16 /* a hash of the change an id asked for */
/* stored: id, u64 BE version, the change's hash */
#define CATP_RID_REC (CATP_RID_BYTES + 8 + CATP_RID_SUM)
/* The largest encoded catalog stored: every process fetches it whole in one
 * CATALOG reply, which must fit a frame (SX_MAX_FRAME); a change past this
 * is refused before it is stored, since a stored catalog that no reply can
 * carry would stop every router and node from refreshing, for good.
 * SHARDEX_CATALOG_MAX_KB (1 .. the default) lowers it, for tests. */
#define CATP_MAX_KB ((long)(SX_MAX_FRAME / 2 / 1024))
#define CATP_ERRLEN 512

struct catp {
    pthread_mutex_t mu;
    ldb *db;
    cat_catalog *cat; /* current catalog (owned) */
    uint8_t *enc;     /* its encoding, served by CATALOG (owned) */
    size_t enc_n;
    uint64_t *parts; /* every storage partition id (from the config) */
    uint32_t nparts;
    size_t max_bytes; /* the largest encoding stored (CATP_MAX_KB) */
    uint8_t *rids;    /* nrids records of CATP_RID_REC bytes, oldest first */
    uint32_t nrids;
    uint64_t applied; /* replicated: the Raft index applied (0: none) */
};

/* A name copied out of a frame as a C string. */
typedef char catp_name[CAT_MAX_NAME + 1];

/* Writes s into out as a printable, shortened quote for messages. */
static void catp_quote(mp_span s, char *out, size_t outn)
{
    size_t i, j = 0;

    for (i = 0; i < s.n && j + 4 < outn; i++) {
        unsigned char ch = s.p[i];
        out[j++] = (ch >= 0x20 && ch < 0x7f) ? (char)ch : '?';
    }
    if (i < s.n && j + 3 < outn) {
        out[j++] = '.';
        out[j++] = '.';
        out[j++] = '.';
    }
    out[j] = '\0';
}

/* Copies a name from the frame into out and validates it; on failure
 * writes a reason naming `what` into err and returns SX_EINVAL. */
static int catp_name_take(mp_span s, catp_name out, const char *what, char *err, size_t errlen)
{
    char q[72];

    catp_quote(s, q, sizeof(q));
    if (s.n == 0) {
        snprintf(err, errlen, "%s name is empty", what);
        return SX_EINVAL;
    }
    if (s.n > CAT_MAX_NAME) {
        snprintf(err, errlen, "%s name '%s' is longer than %d bytes", what, q, CAT_MAX_NAME);
        return SX_EINVAL;
    }
    memcpy(out, s.p, s.n);
    out[s.n] = '\0';
    if (memchr(s.p, '\0', s.n) != NULL || !cat_name_ok(out)) {
        if (strcmp(out, "primary") == 0)
            snprintf(err, errlen, "%s name 'primary' is reserved", what);
        else
            snprintf(err, errlen, "invalid %s name '%s': use only A-Z a-z 0-9 _ . -", what, q);
        return SX_EINVAL;
    }
    return 0;
}

/* Copies and validates a list of attribute names (no repeats). */
static int catp_attrs_take(const msg_spans *in, catp_name *out, const char **ptrs, const char *what,
                           char *err, size_t errlen)
{
    uint32_t i, j;
    int rc;

    if (in->n > CAT_MAX_ATTRS) {
        snprintf(err, errlen, "too many %s attributes (%u; at most %d)", what, in->n,
                 CAT_MAX_ATTRS);
        return SX_EINVAL;
    }
    for (i = 0; i < in->n; i++) {
        if ((rc = catp_name_take(in->v[i], out[i], what, err, errlen)) != 0)
            return rc;
        for (j = 0; j < i; j++) {
            if (strcmp(out[i], out[j]) == 0) {
                snprintf(err, errlen, "%s attribute '%s' repeated", what, out[i]);
                return SX_EINVAL;
            }
        }
        ptrs[i] = out[i];
    }
    return 0;
}

/* Explains a mutation's error code when no earlier check produced a reason. */
static void catp_explain(int rc, const char *what, char *err, size_t errlen)
{
    if (err[0] == '\0')
        snprintf(err, errlen, "%s: %s", what, sx_strerror(rc));
}

/* CATOP_CREATE_TABLE on next. */
static int catp_create_table(cat_catalog *next, const msg_CAT_UPDATE_req *r, char *err,
                             size_t errlen)
{
    catp_name name, pk, sk;
    const cat_table *t;
    int rc;

    if ((rc = catp_name_take(r->table, name, "table", err, errlen)) != 0 ||
        (rc = catp_name_take(r->pk, pk, "partition key", err, errlen)) != 0)
        return rc;
    sk[0] = '\0';
    if (r->sk.n > 0 && (rc = catp_name_take(r->sk, sk, "sort key", err, errlen)) != 0)
        return rc;
    if (sk[0] != '\0' && strcmp(pk, sk) == 0) {
        snprintf(err, errlen, "sort key '%s' is the same attribute as the partition key", sk);
        return SX_EINVAL;
    }
    t = cat_table_by_name(next, name, strlen(name));
    if (t != NULL) {
        bool same = strcmp(t->pk, pk) == 0 &&
                    ((t->sk == NULL && sk[0] == '\0') || (t->sk != NULL && strcmp(t->sk, sk) == 0));
        if (same)
            snprintf(err, errlen, "table '%s' already exists", name);
        else
            snprintf(err, errlen,
                     "table '%s' already exists with a different key (pk '%s', sk %s%s%s)", name,
                     t->pk, t->sk ? "'" : "", t->sk ? t->sk : "none", t->sk ? "'" : "");
        return SX_EEXIST;
    }
    rc = cat_create_table(next, name, pk, sk[0] ? sk : NULL);
    if (rc != 0)
        catp_explain(rc, "create table", err, errlen);
    return rc;
}

/* Checks the projection of a CATOP_CREATE_INDEX request. */
static int catp_check_proj(const msg_CAT_UPDATE_req *r, char *err, size_t errlen)
{
    if (r->proj > CAT_PROJ_LIST) {
        snprintf(err, errlen, "unknown projection %llu (0 keys, 1 all, 2 list)",
                 (unsigned long long)r->proj);
        return SX_EINVAL;
    }
    if (r->proj != CAT_PROJ_LIST && r->proj_attrs.n > 0) {
        snprintf(err, errlen, "projection attributes are only allowed with projection 'list'");
        return SX_EINVAL;
    }
    if (r->proj == CAT_PROJ_LIST && r->proj_attrs.n == 0) {
        snprintf(err, errlen, "projection 'list' needs at least one projection attribute");
        return SX_EINVAL;
    }
    return 0;
}

/* CATOP_CREATE_INDEX on next. */
static int catp_create_index(cat_catalog *next, const msg_CAT_UPDATE_req *r, char *err,
                             size_t errlen)
{
    catp_name table, name;
    catp_name attrs[CAT_MAX_ATTRS], proj[CAT_MAX_ATTRS];
    const char *ap[CAT_MAX_ATTRS], *pp[CAT_MAX_ATTRS];
    const cat_table *t;
    int rc;

    if ((rc = catp_name_take(r->table, table, "table", err, errlen)) != 0 ||
        (rc = catp_name_take(r->index, name, "index", err, errlen)) != 0)
        return rc;
    if (r->attrs.n == 0) {
        snprintf(err, errlen, "index '%s' needs at least one attribute", name);
        return SX_EINVAL;
    }
    if ((rc = catp_attrs_take(&r->attrs, attrs, ap, "index", err, errlen)) != 0 ||
        (rc = catp_check_proj(r, err, errlen)) != 0 ||
        (rc = catp_attrs_take(&r->proj_attrs, proj, pp, "projection", err, errlen)) != 0)
        return rc;
    t = cat_table_by_name(next, table, strlen(table));
    if (t == NULL) {
        snprintf(err, errlen, "table '%s' does not exist", table);
        return SX_ENOTABLE;
    }
    if (cat_index_by_name(t, name, strlen(name)) != NULL) {
        snprintf(err, errlen, "index '%s' already exists on table '%s'", name, table);
        return SX_EEXIST;
    }
    rc = cat_create_index(next, table, name, ap, r->attrs.n, (cat_proj)r->proj, pp,
                          r->proj_attrs.n);
    if (rc != 0)
        catp_explain(rc, "create index", err, errlen);
    return rc;
}

/* CATOP_DROP_INDEX on next. */
static int catp_drop_index(cat_catalog *next, const msg_CAT_UPDATE_req *r, char *err, size_t errlen)
{
    catp_name table, name;
    const cat_table *t;
    int rc;

    if ((rc = catp_name_take(r->table, table, "table", err, errlen)) != 0 ||
        (rc = catp_name_take(r->index, name, "index", err, errlen)) != 0)
        return rc;
    t = cat_table_by_name(next, table, strlen(table));
    if (t == NULL) {
        snprintf(err, errlen, "table '%s' does not exist", table);
        return SX_ENOTABLE;
    }
    if (cat_index_by_name(t, name, strlen(name)) == NULL) {
        snprintf(err, errlen, "index '%s' does not exist on table '%s'", name, table);
        return SX_ENOINDEX;
    }
    rc = cat_drop_index(next, table, name);
    if (rc != 0)
        catp_explain(rc, "drop index", err, errlen);
    return rc;
}

/* Applies a decoded CAT_UPDATE to next. */
static int catp_mutate_update(cat_catalog *next, const msg_CAT_UPDATE_req *r, char *err,
                              size_t errlen)
{
    switch (r->op) {
    case CATOP_CREATE_TABLE: return catp_create_table(next, r, err, errlen);
    case CATOP_CREATE_INDEX: return catp_create_index(next, r, err, errlen);
    case CATOP_DROP_INDEX: return catp_drop_index(next, r, err, errlen);
    default:
        snprintf(err, errlen, "unknown catalog operation %llu", (unsigned long long)r->op);
        return SX_EINVAL;
    }
}

/* The stored record of request id rid (CATP_RID_BYTES), or NULL when it
 * is not among the remembered ones (caller holds c->mu). */
static const uint8_t *catp_rid_find(const catp *c, const uint8_t *rid)
{
    for (uint32_t i = c->nrids; i-- > 0;)
        if (memcmp(c->rids + (size_t)i * CATP_RID_REC, rid, CATP_RID_BYTES) == 0)
            return c->rids + (size_t)i * CATP_RID_REC;
    return NULL;
}

/* sum = a hash of the change r asks for (every field but its id); 0, or
 * SX_ENOMEM. */
static int catp_rid_sum(const msg_CAT_UPDATE_req *r, uint8_t *sum)
{
    msg_CAT_UPDATE_req q = *r;
    mp_buf b;
    int rc;

    q.rid = (mp_span){ NULL, 0 };
    mp_buf_init(&b);
    rc = msg_encode_req(MSG_CAT_UPDATE, &q, &b);
    if (rc == 0)
        crypto_generichash(sum, CATP_RID_SUM, (const uint8_t *)b.sb.data, b.sb.size, NULL, 0);
    mp_buf_free(&b);
    return rc;
}

/* The remembered ids with (rid, version, sum) added as the newest, the
 * oldest dropped past CATP_RIDS: a new array of *n records, or NULL (no
 * memory). */
static uint8_t *catp_rids_with(const catp *c, const uint8_t *rid, uint64_t version,
                               const uint8_t *sum, uint32_t *n)
{
    uint32_t keep = c->nrids < CATP_RIDS ? c->nrids : CATP_RIDS - 1;
    uint8_t *v = malloc((size_t)(keep + 1) * CATP_RID_REC);

    if (v == NULL)
        return NULL;
    if (keep > 0)
        memcpy(v, c->rids + (size_t)(c->nrids - keep) * CATP_RID_REC, (size_t)keep * CATP_RID_REC);
    memcpy(v + (size_t)keep * CATP_RID_REC, rid, CATP_RID_BYTES);
    be_put64(v + (size_t)keep * CATP_RID_REC + CATP_RID_BYTES, version);
    memcpy(v + (size_t)keep * CATP_RID_REC + CATP_RID_BYTES + 8, sum, CATP_RID_SUM);
    *n = keep + 1;
    return v;
}

/* Decodes a CAT_BACKFILLED frame and applies it to next. A repeated report
 * (partition already done, or index already ready) changes nothing. */
static int catp_mutate_backfilled(const catp *c, cat_catalog *next, const uint8_t *req, size_t n,
                                  char *err, size_t errlen)
{
    msg_CAT_BACKFILLED_req r;
    cat_table *t = NULL;
    cat_index *ix;
    uint32_t i;
    bool known = false;
    int rc = msg_decode_req(MSG_CAT_BACKFILLED, req, n, &r);

    if (rc != 0) {
        snprintf(err, errlen, "malformed CAT_BACKFILLED request");
        return rc;
    }
    for (i = 0; i < c->nparts; i++)
        known = known || c->parts[i] == r.part;
    ix = r.index_id <= UINT32_MAX ? cat_index_by_id(next, (uint32_t)r.index_id, &t) : NULL;
    if (!known) {
        snprintf(err, errlen, "partition %llu is not a storage partition",
                 (unsigned long long)r.part);
        rc = SX_EINVAL;
    } else if (ix == NULL) {
        snprintf(err, errlen, "index id %llu does not exist (dropped?)",
                 (unsigned long long)r.index_id);
        rc = SX_ENOINDEX;
    } else if (ix->state != CAT_READY) {
        for (i = 0; i < ix->ndone && ix->done_parts[i] != r.part; i++)
            ;
        if (i == ix->ndone) {
            rc = cat_mark_backfilled(next, (uint32_t)r.index_id, r.part, c->parts, c->nparts);
            if (rc != 0)
                catp_explain(rc, "mark backfilled", err, errlen);
        }
    }
    msg_free_req(MSG_CAT_BACKFILLED, &r);
    return rc;
}

/* Encodes cat and writes it durably, with the request ids rids (nrids
 * records) when rids is not NULL, in one batch. On success *enc (of
 * *enc_n bytes) owns its encoding. Returns 0, SX_ETOOBIG (past
 * c->max_bytes: nothing written), SX_EIO or SX_ENOMEM. */
static int catp_store(catp *c, const cat_catalog *cat, const uint8_t *rids, uint32_t nrids,
                      uint64_t index, uint8_t **enc, size_t *enc_n)
{
    mp_buf b;
    leveldb_writebatch_t *wb;
    int rc;

    mp_buf_init(&b);
    rc = cat_encode(cat, &b);
    if (rc == 0)
        rc = mp_buf_take(&b, enc, enc_n);
    mp_buf_free(&b);
    if (rc != 0)
        return rc;
    /* replicated: the same bound on every replica, whatever a process's
     * environment says (SHARDEX_CATALOG_MAX_KB is a test knob) */
    if (*enc_n > (index != 0 ? (size_t)CATP_MAX_KB << 10 : c->max_bytes)) {
        free(*enc);
        return SX_ETOOBIG;
    }
    wb = leveldb_writebatch_create();
    if (wb == NULL) {
        free(*enc);
        return SX_ENOMEM;
    }
    leveldb_writebatch_put(wb, CATP_KEY, strlen(CATP_KEY), (const char *)*enc, *enc_n);
    if (rids != NULL)
        leveldb_writebatch_put(wb, CATP_RIDS_KEY, strlen(CATP_RIDS_KEY), (const char *)rids,
                               (size_t)nrids * CATP_RID_REC);
    if (index != 0) {
        /* replicated: the Raft log is the write-ahead log; the applied
         * index goes with the state it describes */
        uint8_t be[8];
        be_put64(be, index);
        leveldb_writebatch_put(wb, CATP_APPLIED_KEY, strlen(CATP_APPLIED_KEY), (const char *)be, 8);
        rc = ldb_write_lazy(c->db, wb);
    } else {
        rc = ldb_write_sync(c->db, wb);
    }
    leveldb_writebatch_destroy(wb);
    if (rc != 0)
        free(*enc);
    return rc;
}

/* Writes the applied index alone (an entry that changed nothing), lazily:
 * the Raft log replays it after a crash. Returns 0 or SX_EIO/SX_ENOMEM. */
static int catp_put_applied(catp *c, uint64_t index)
{
    uint8_t be[8];
    leveldb_writebatch_t *wb = leveldb_writebatch_create();
    if (wb == NULL)
        return SX_ENOMEM;
    be_put64(be, index);
    leveldb_writebatch_put(wb, CATP_APPLIED_KEY, strlen(CATP_APPLIED_KEY), (const char *)be, 8);
    int rc = ldb_write_lazy(c->db, wb);
    leveldb_writebatch_destroy(wb);
    return rc;
}

/* The one mutation path: decode frame (CAT_UPDATE or CAT_BACKFILLED) →
 * mutate a clone → encode → write → swap in. index 0: a catalog of one
 * replica, the write is synced; index > 0: the Raft entry being applied,
 * the write is lazy (the Raft log is the write-ahead log) and records
 * index as applied, also when the change is refused or changes nothing.
 * Sets *version to the catalog version after the call (unchanged on error
 * or a no-op), or, for a CAT_UPDATE whose request id was already applied,
 * to the version that made it (nothing is applied). Returns 0 or an sx_err
 * with a reason in err (SX_EIO: nothing could be written). Takes c->mu. */
static int catp_apply(catp *c, msg_type t, const uint8_t *req, size_t n, uint64_t index,
                      uint64_t *version, char *err, size_t errlen)
{
    cat_catalog *next = NULL;
    msg_CAT_UPDATE_req upd;
    bool decoded = false;
    uint8_t *enc = NULL, *rids = NULL, sum[CATP_RID_SUM];
    uint32_t nrids = 0;
    const uint8_t *seen = NULL;
    size_t enc_n = 0;
    bool stored = false;
    int rc;

    err[0] = '\0';
    pthread_mutex_lock(&c->mu);
    if (t == MSG_CAT_UPDATE) {
        rc = msg_decode_req(MSG_CAT_UPDATE, req, n, &upd);
        if (rc != 0) {
            snprintf(err, errlen, "malformed CAT_UPDATE request");
            goto out;
        }
        decoded = true;
        if (upd.rid.n != 0 && upd.rid.n != CATP_RID_BYTES) {
            snprintf(err, errlen, "a request id is %d bytes, not %zu", CATP_RID_BYTES, upd.rid.n);
            rc = SX_EINVAL;
            goto out;
        }
        if (upd.rid.n != 0 && (rc = catp_rid_sum(&upd, sum)) != 0) {
            snprintf(err, errlen, "catalog partition out of memory");
            goto out;
        }
        if (upd.rid.n != 0 && (seen = catp_rid_find(c, upd.rid.p)) != NULL) {
            if (memcmp(seen + CATP_RID_BYTES + 8, sum, CATP_RID_SUM) != 0) {
                seen = NULL;
                snprintf(err, errlen,
                         "this request id was used for another catalog change: "
                         "nothing was changed (ids must be random, one per change)");
                rc = SX_EINVAL;
                goto out;
            }
            LOG_INFO("catalog: a CAT_UPDATE asked again (request id known): answered with "
                     "the version it made, %llu",
                     (unsigned long long)be_get64(seen + CATP_RID_BYTES));
            rc = 0;
            goto out;
        }
    }
    next = cat_clone(c->cat);
    if (next == NULL) {
        rc = SX_ENOMEM;
        snprintf(err, errlen, "catalog partition out of memory");
        goto out;
    }
    if (t == MSG_CAT_UPDATE)
        rc = catp_mutate_update(next, &upd, err, errlen);
    else
        rc = catp_mutate_backfilled(c, next, req, n, err, errlen);
    if (rc != 0 || next->version == c->cat->version)
        goto out;
    if (decoded && upd.rid.n != 0 &&
        (rids = catp_rids_with(c, upd.rid.p, next->version, sum, &nrids)) == NULL) {
        rc = SX_ENOMEM;
        snprintf(err, errlen, "catalog partition out of memory");
        goto out;
    }
    rc = catp_store(c, next, rids, nrids, index, &enc, &enc_n);
    stored = rc == 0;
    if (rc == SX_ETOOBIG) {
        snprintf(err, errlen,
                 "the catalog would grow past %zu KiB (every table and index "
                 "of the cluster travel in one reply): nothing was changed",
                 c->max_bytes >> 10);
        goto out;
    }
    if (rc == SX_EIO) {
        snprintf(err, errlen,
                 "catalog write failed: a disk error on the catalog node "
                 "(this change may or may not survive; the node refuses writes until it "
                 "restarts)");
        goto out;
    }
    if (rc != 0) {
        snprintf(err, errlen, "catalog write failed: %s", sx_strerror(rc));
        goto out;
    }
    cat_free(c->cat);
    free(c->enc);
    c->cat = next;
    c->enc = enc;
    c->enc_n = enc_n;
    next = NULL;
    if (rids != NULL) {
        free(c->rids);
        c->rids = rids;
        c->nrids = nrids;
        rids = NULL;
    }
    LOG_INFO("catalog now at version %llu (%s)", (unsigned long long)c->cat->version, msg_name(t));
out:
    *version = seen != NULL ? be_get64(seen + CATP_RID_BYTES) : c->cat->version;
    /* replicated: a decision (made, or refused) moves the applied index; a
     * failure of this replica's own (disk, memory) does not: the entry is
     * applied again after its restart */
    bool decided = stored || (rc != SX_EIO && rc != SX_ENOMEM);
    if (index != 0 && !stored && decided && catp_put_applied(c, index) != 0) {
        snprintf(err, errlen, "catalog write failed: a disk error on this replica");
        rc = SX_EIO;
        decided = false;
    }
    if (index != 0 && decided)
        c->applied = index;
    pthread_mutex_unlock(&c->mu);
    if (decoded)
        msg_free_req(MSG_CAT_UPDATE, &upd);
    free(rids);
    cat_free(next);
    return rc;
}

/* Loads the applied Raft index (0 when none was recorded). */
static int catp_load_applied(catp *c)
{
    uint8_t *v = NULL;
    size_t vn = 0;
    int rc = ldb_get(c->db, CATP_APPLIED_KEY, strlen(CATP_APPLIED_KEY), &v, &vn);

    c->applied = 0;
    if (rc == SX_ENOTFOUND)
        return 0;
    if (rc != 0)
        return rc;
    if (vn == 8)
        c->applied = be_get64(v);
    free(v);
    return vn == 8 ? 0 : SX_EIO;
}

/* Loads the remembered request ids; a record that does not parse is
 * logged and dropped (they only spare retries an error). */
static int catp_load_rids(catp *c)
{
    uint8_t *v = NULL;
    size_t vn = 0;
    int rc = ldb_get(c->db, CATP_RIDS_KEY, strlen(CATP_RIDS_KEY), &v, &vn);

    if (rc == SX_ENOTFOUND)
        return 0;
    if (rc != 0)
        return rc;
    if (vn % CATP_RID_REC != 0 || vn / CATP_RID_REC > CATP_RIDS) {
        LOG_WARN("catalog partition: stored request ids are %zu bytes, not whole records; "
                 "dropped them (a client retrying a change made before may be told it "
                 "exists)",
                 vn);
        free(v);
        return 0;
    }
    c->rids = v;
    c->nrids = (uint32_t)(vn / CATP_RID_REC);
    return 0;
}

/* Loads the stored catalog, or starts an empty one. */
static int catp_load(catp *c)
{
    uint8_t *v = NULL;
    size_t vn = 0;
    mp_buf b;
    int rc = ldb_get(c->db, CATP_KEY, strlen(CATP_KEY), &v, &vn);

    if (rc == 0) {
        rc = cat_decode(v, vn, &c->cat);
        if (rc == 0) {
            c->enc = v;
            c->enc_n = vn;
            return 0;
        }
        free(v);
        LOG_ERROR("catalog partition: stored catalog does not decode (%s)", sx_strerror(rc));
        return rc == SX_ENOMEM ? SX_ENOMEM : SX_EIO;
    }
    if (rc != SX_ENOTFOUND)
        return rc;
    c->cat = cat_new();
    if (c->cat == NULL)
        return SX_ENOMEM;
    mp_buf_init(&b);
    rc = cat_encode(c->cat, &b);
    if (rc == 0)
        rc = mp_buf_take(&b, &c->enc, &c->enc_n);
    mp_buf_free(&b);
    return rc;
}

int catp_open(const char *dir, const cfg_cluster *cfg, catp **out)
{
    catp *c = calloc(1, sizeof(*c));
    int i, rc;

    if (c == NULL)
        return SX_ENOMEM;
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        free(c);
        return SX_ENOMEM;
    }
    c->parts = calloc(cfg->nstorage > 0 ? (size_t)cfg->nstorage : 1, sizeof(uint64_t));
    if (c->parts == NULL) {
        rc = SX_ENOMEM;
        goto fail;
    }
    for (i = 0; i < cfg->nstorage; i++)
        c->parts[i] = cfg->storage[i].id;
    c->nparts = (uint32_t)cfg->nstorage;
    c->max_bytes = (size_t)os_env_long("SHARDEX_CATALOG_MAX_KB", 1, CATP_MAX_KB, CATP_MAX_KB) << 10;
    if ((rc = ldb_open(dir, &c->db)) != 0 || (rc = catp_load(c)) != 0 ||
        (rc = catp_load_rids(c)) != 0 || (rc = catp_load_applied(c)) != 0)
        goto fail;
    LOG_INFO("catalog partition open at %s: version %llu, %u tables", dir,
             (unsigned long long)c->cat->version, c->cat->ntables);
    *out = c;
    return 0;
fail:
    catp_close(c);
    return rc;
}

void catp_close(catp *c)
{
    if (c == NULL)
        return;
    ldb_close(c->db);
    cat_free(c->cat);
    free(c->enc);
    free(c->parts);
    free(c->rids);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

uint64_t catp_version(catp *c)
{
    uint64_t v;

    pthread_mutex_lock(&c->mu);
    v = c->cat->version;
    pthread_mutex_unlock(&c->mu);
    return v;
}

cat_catalog *catp_snapshot(catp *c)
{
    cat_catalog *copy;

    pthread_mutex_lock(&c->mu);
    copy = cat_clone(c->cat);
    pthread_mutex_unlock(&c->mu);
    return copy;
}

/* CATALOG: the current version and catalog map (nil below `since`). */
static void catp_serve_catalog(catp *c, const uint8_t *req, size_t n, mp_buf *out)
{
    msg_CATALOG_req r;
    msg_CATALOG_rep rep;
    int rc = msg_decode_req(MSG_CATALOG, req, n, &r);

    if (rc != 0) {
        msg_encode_err(MSG_CATALOG, rc, "malformed CATALOG request", out);
        return;
    }
    memset(&rep, 0, sizeof(rep));
    pthread_mutex_lock(&c->mu);
    rep.version = c->cat->version;
    if (r.since == 0 || rep.version >= r.since) {
        rep.catalog.p = c->enc;
        rep.catalog.n = c->enc_n; /* else n == 0: encoded as nil */
    }
    msg_free_req(MSG_CATALOG, &r);
    rc = msg_encode_rep(MSG_CATALOG, &rep, out);
    pthread_mutex_unlock(&c->mu);
    if (rc != 0) {
        mp_buf_free(out);
        mp_buf_init(out);
        msg_encode_err(MSG_CATALOG, rc, "catalog reply failed", out);
    }
}

void catp_handle(catp *c, msg_type t, const uint8_t *req, size_t n, mp_buf *out)
{
    char err[CATP_ERRLEN];
    uint64_t version = 0;
    int rc;

    if (t == MSG_CATALOG) {
        catp_serve_catalog(c, req, n, out);
        return;
    }
    if (t != MSG_CAT_UPDATE && t != MSG_CAT_BACKFILLED) {
        msg_encode_err(t, SX_EINVAL, "message not served by the catalog partition", out);
        return;
    }
    rc = catp_apply(c, t, req, n, 0, &version, err, sizeof(err));
    if (rc != 0) {
        if (rc != SX_EEXIST)
            LOG_INFO("catalog %s refused: %s", msg_name(t), err);
        msg_encode_err(t, rc, err, out);
        return;
    }
    if (t == MSG_CAT_UPDATE) {
        msg_CAT_UPDATE_rep rep = { .version = version };
        rc = msg_encode_rep(t, &rep, out);
    } else {
        msg_CAT_BACKFILLED_rep rep = { .version = version };
        rc = msg_encode_rep(t, &rep, out);
    }
    if (rc != 0) {
        mp_buf_free(out);
        mp_buf_init(out);
        msg_encode_err(t, rc, "catalog reply failed", out);
    }
}

int catp_apply_entry(catp *c, uint64_t index, const uint8_t *entry, size_t n, mp_buf *reply)
{
    char err[CATP_ERRLEN];
    uint64_t version = 0;
    msg_type t = n > 0 ? (msg_type)entry[0] : (msg_type)0;
    int rc;

    if (n == 0 || (t != MSG_CAT_UPDATE && t != MSG_CAT_BACKFILLED)) {
        /* not a change the leader would propose: refused alike everywhere */
        rc = catp_mark_applied(c, index);
        if (rc == 0)
            rc = msg_encode_err(t, SX_EINVAL, "not a catalog change", reply);
        return rc == SX_ENOMEM ? 0 : rc;
    }
    rc = catp_apply(c, t, entry + 1, n - 1, index, &version, err, sizeof(err));
    /* not a decision on the change itself: this replica cannot apply it as
     * the others do, so it stops (and replays the entry at its restart) */
    if (rc == SX_EIO || rc == SX_ENOMEM)
        return rc;
    if (rc != 0) {
        if (rc != SX_EEXIST)
            LOG_INFO("catalog %s refused: %s", msg_name(t), err);
        msg_encode_err(t, rc, err, reply);
        return 0;
    }
    if (t == MSG_CAT_UPDATE) {
        msg_CAT_UPDATE_rep rep = { .version = version };
        msg_encode_rep(t, &rep, reply);
    } else {
        msg_CAT_BACKFILLED_rep rep = { .version = version };
        msg_encode_rep(t, &rep, reply);
    }
    return 0;
}

int catp_mark_applied(catp *c, uint64_t index)
{
    pthread_mutex_lock(&c->mu);
    int rc = catp_put_applied(c, index);
    if (rc == 0)
        c->applied = index;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

uint64_t catp_applied(catp *c)
{
    pthread_mutex_lock(&c->mu);
    uint64_t a = c->applied;
    pthread_mutex_unlock(&c->mu);
    return a;
}

ldb *catp_db(catp *c)
{
    return c->db;
}

const char *catp_applied_key(size_t *n)
{
    *n = strlen(CATP_APPLIED_KEY);
    return CATP_APPLIED_KEY;
}

int catp_reload(catp *c)
{
    pthread_mutex_lock(&c->mu);
    cat_catalog *old_cat = c->cat;
    uint8_t *old_enc = c->enc, *old_rids = c->rids;
    size_t old_enc_n = c->enc_n;
    uint32_t old_nrids = c->nrids;
    c->cat = NULL;
    c->enc = NULL;
    c->rids = NULL;
    c->nrids = 0;
    int rc = catp_load(c);
    if (rc == 0)
        rc = catp_load_rids(c);
    if (rc == 0)
        rc = catp_load_applied(c);
    if (rc != 0) {
        cat_free(c->cat);
        free(c->enc);
        free(c->rids);
        c->cat = old_cat;
        c->enc = old_enc;
        c->enc_n = old_enc_n;
        c->rids = old_rids;
        c->nrids = old_nrids;
    } else {
        cat_free(old_cat);
        free(old_enc);
        free(old_rids);
        LOG_INFO("catalog partition reloaded from a snapshot: version %llu, applied %llu",
                 (unsigned long long)c->cat->version, (unsigned long long)c->applied);
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}
