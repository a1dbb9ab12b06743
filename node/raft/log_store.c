/*
 * log_store.c — the durable Raft log on leveldb (raft_log_store.h): one
 * leveldb per node, every group's hard state, snapshot meta and entries,
 * one synced WriteBatch per ready round, CRC-checked records, and loading
 * with corruption and gap detection.  Keeps, per group, the bounds of the
 * durable log [first, last] so that overwrites and compactions can delete
 * the right keys without reading them.
 */
#include <leveldb/c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "raft_codec.h"
#include "raft_log_store.h"

typedef struct bounds {
    uint64_t group;
    uint64_t first, last; /* durable entries [first, last]; empty: last < first */
} bounds;

struct raft_store {
    leveldb_t *db;
    leveldb_options_t *opts;
    leveldb_writeoptions_t *wo;
    leveldb_readoptions_t *ro;
    bounds *b;
    size_t nb, capb;
};

struct raft_store_batch {
    raft_store *s;
    leveldb_writebatch_t *wb;
    bounds *b; /* bounds after this batch, for the groups it touches */
    size_t nb, capb;
};

static void put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (56 - 8 * i));
}
static uint64_t get_be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return v;
}

static size_t key_of(uint8_t *k, char type, uint64_t group, uint64_t index)
{
    k[0] = (uint8_t)type;
    put_be64(k + 1, group);
    if (type != 'e')
        return 9;
    put_be64(k + 9, index);
    return 17;
}

static void set_err(char *err, size_t errlen, const char *msg)
{
    if (!err || !errlen)
        return;
    snprintf(err, errlen, "%s", msg ? msg : "unknown");
}

/* raft_store_open: contract (arguments, ownership, errors) in raft_log_store.h. */
int raft_store_open(const char *path, int sync, raft_store **out, char *err, size_t errlen)
{
    *out = NULL;
    raft_store *s = calloc(1, sizeof *s);
    if (!s)
        return RAFT_ERR_NOMEM;
    s->opts = leveldb_options_create();
    s->wo = leveldb_writeoptions_create();
    s->ro = leveldb_readoptions_create();
    if (!s->opts || !s->wo || !s->ro) {
        raft_store_close(s);
        return RAFT_ERR_NOMEM;
    }
    leveldb_options_set_create_if_missing(s->opts, 1);
    leveldb_writeoptions_set_sync(s->wo, (unsigned char)(sync ? 1 : 0));
    leveldb_readoptions_set_verify_checksums(s->ro, 1);
    char *e = NULL;
    s->db = leveldb_open(s->opts, path, &e);
    if (e || !s->db) {
        set_err(err, errlen, e);
        leveldb_free(e);
        raft_store_close(s);
        return RAFT_ERR_IO;
    }
    *out = s;
    return RAFT_OK;
}

/* raft_store_close: contract (arguments, ownership, errors) in raft_log_store.h. */
void raft_store_close(raft_store *s)
{
    if (!s)
        return;
    if (s->db)
        leveldb_close(s->db);
    if (s->opts)
        leveldb_options_destroy(s->opts);
    if (s->wo)
        leveldb_writeoptions_destroy(s->wo);
    if (s->ro)
        leveldb_readoptions_destroy(s->ro);
    free(s->b);
    free(s);
}

static bounds *find_bounds(bounds *v, size_t n, uint64_t group)
{
    for (size_t i = 0; i < n; i++)
        if (v[i].group == group)
            return &v[i];
    return NULL;
}

static bounds *add_bounds(bounds **v, size_t *n, size_t *cap, uint64_t group)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 8;
        bounds *nv = realloc(*v, nc * sizeof *nv);
        if (!nv)
            return NULL;
        *v = nv;
        *cap = nc;
    }
    bounds *b = &(*v)[(*n)++];
    memset(b, 0, sizeof *b);
    b->group = group;
    return b;
}

/* Scans a group's entry keys for its bounds (first use of a group that was
 * not loaded).  Returns RAFT_OK or NOMEM. */
static int scan_bounds(raft_store *s, uint64_t group, bounds *out)
{
    uint8_t k[17];
    key_of(k, 'e', group, 0);
    leveldb_iterator_t *it = leveldb_create_iterator(s->db, s->ro);
    if (!it)
        return RAFT_ERR_NOMEM;
    out->group = group;
    out->first = 1;
    out->last = 0;
    int any = 0;
    for (leveldb_iter_seek(it, (const char *)k, 9); leveldb_iter_valid(it); leveldb_iter_next(it)) {
        size_t kl;
        const uint8_t *kk = (const uint8_t *)leveldb_iter_key(it, &kl);
        if (kl != 17 || memcmp(kk, k, 9))
            break;
        uint64_t idx = get_be64(kk + 9);
        if (!any)
            out->first = idx;
        out->last = idx;
        any = 1;
    }
    leveldb_iter_destroy(it);
    return RAFT_OK;
}

static int batch_bounds(raft_store_batch *b, uint64_t group, bounds **out)
{
    bounds *x = find_bounds(b->b, b->nb, group);
    if (!x) {
        bounds cur;
        bounds *c = find_bounds(b->s->b, b->s->nb, group);
        if (c) {
            cur = *c;
        } else {
            int rc = scan_bounds(b->s, group, &cur);
            if (rc)
                return rc;
        }
        x = add_bounds(&b->b, &b->nb, &b->capb, group);
        if (!x)
            return RAFT_ERR_NOMEM;
        *x = cur;
    }
    *out = x;
    return RAFT_OK;
}

/* raft_store_groups: contract (arguments, ownership, errors) in raft_log_store.h. */
int raft_store_groups(raft_store *s, uint64_t *groups, size_t max, size_t *n)
{
    *n = 0;
    static const char types[] = { 'e', 'h', 's' };
    uint64_t *seen = NULL;
    size_t ns = 0, cs = 0;
    leveldb_iterator_t *it = leveldb_create_iterator(s->db, s->ro);
    if (!it)
        return RAFT_ERR_NOMEM;
    int rc = RAFT_OK;
    for (int t = 0; t < 3 && rc == RAFT_OK; t++) {
        uint8_t k[17];
        key_of(k, types[t], 0, 0);
        leveldb_iter_seek(it, (const char *)k, 9);
        while (leveldb_iter_valid(it)) {
            size_t kl;
            const uint8_t *kk = (const uint8_t *)leveldb_iter_key(it, &kl);
            if (kl < 9 || kk[0] != (uint8_t)types[t])
                break;
            uint64_t g = get_be64(kk + 1);
            size_t i = 0;
            while (i < ns && seen[i] != g)
                i++;
            if (i == ns) {
                if (ns == cs) {
                    cs = cs ? cs * 2 : 16;
                    uint64_t *nv = realloc(seen, cs * sizeof *nv);
                    if (!nv) {
                        rc = RAFT_ERR_NOMEM;
                        break;
                    }
                    seen = nv;
                }
                seen[ns++] = g;
            }
            if (g == UINT64_MAX)
                break;
            key_of(k, types[t], g + 1, 0);
            leveldb_iter_seek(it, (const char *)k, 9);
        }
    }
    leveldb_iter_destroy(it);
    for (size_t i = 0; i < ns && i < max; i++)
        groups[i] = seen[i];
    *n = ns;
    free(seen);
    return rc;
}

static int get_rec(raft_store *s, const uint8_t *k, size_t kl, char **val, size_t *vl)
{
    char *e = NULL;
    *val = leveldb_get(s->db, s->ro, (const char *)k, kl, vl, &e);
    if (e) {
        leveldb_free(e);
        return RAFT_ERR_IO;
    }
    return RAFT_OK;
}

/* raft_store_set_replica: contract in raft_log_store.h. */
int raft_store_set_replica(raft_store *s, uint64_t group, uint64_t id)
{
    uint8_t k[17], v[12];
    raft_put64(v + 4, id);
    uint32_t crc = raft_crc32c(0, v + 4, 8);
    for (int i = 0; i < 4; i++)
        v[i] = (uint8_t)(crc >> (24 - 8 * i));
    leveldb_writeoptions_t *wo = leveldb_writeoptions_create();
    if (!wo)
        return RAFT_ERR_NOMEM;
    leveldb_writeoptions_set_sync(wo, 1);
    char *e = NULL;
    leveldb_put(s->db, wo, (const char *)k, key_of(k, 'r', group, 0), (const char *)v, sizeof v,
                &e);
    leveldb_writeoptions_destroy(wo);
    if (e) {
        leveldb_free(e);
        return RAFT_ERR_IO;
    }
    return RAFT_OK;
}

/* raft_store_get_replica: contract in raft_log_store.h. */
int raft_store_get_replica(raft_store *s, uint64_t group, uint64_t *id)
{
    uint8_t k[17];
    char *v;
    size_t vl;
    *id = 0;
    int rc = get_rec(s, k, key_of(k, 'r', group, 0), &v, &vl);
    if (rc || !v)
        return rc;
    uint32_t crc = 0;
    if (vl == 12)
        for (int i = 0; i < 4; i++)
            crc = (crc << 8) | (uint8_t)v[i];
    if (vl != 12 || crc != raft_crc32c(0, v + 4, 8)) {
        leveldb_free(v);
        return RAFT_ERR_CORRUPT;
    }
    *id = raft_get64((const uint8_t *)v + 4);
    leveldb_free(v);
    return RAFT_OK;
}

/* raft_store_load: contract (arguments, ownership, errors) in raft_log_store.h. */
int raft_store_load(raft_store *s, uint64_t group, raft_hard_state *hs, raft_snap_meta *snap,
                    raft_store_entry_fn fn, void *ctx, uint64_t *bad_index)
{
    memset(hs, 0, sizeof *hs);
    memset(snap, 0, sizeof *snap);
    if (bad_index)
        *bad_index = 0;
    uint8_t k[17];
    char *v;
    size_t vl;
    int rc = get_rec(s, k, key_of(k, 'h', group, 0), &v, &vl);
    if (rc)
        return rc;
    if (v) {
        rc = raft_codec_hs_decode((const uint8_t *)v, vl, hs);
        leveldb_free(v);
        if (rc)
            return rc;
    }
    rc = get_rec(s, k, key_of(k, 's', group, 0), &v, &vl);
    if (rc)
        return rc;
    if (v) {
        rc = raft_codec_snap_decode((const uint8_t *)v, vl, snap);
        leveldb_free(v);
        if (rc)
            return rc;
    }
    leveldb_iterator_t *it = leveldb_create_iterator(s->db, s->ro);
    if (!it)
        return RAFT_ERR_NOMEM;
    key_of(k, 'e', group, 0);
    uint64_t expect = snap->index + 1;
    for (leveldb_iter_seek(it, (const char *)k, 9); leveldb_iter_valid(it); leveldb_iter_next(it)) {
        size_t kl;
        const uint8_t *kk = (const uint8_t *)leveldb_iter_key(it, &kl);
        if (kl != 17 || memcmp(kk, k, 9))
            break;
        uint64_t idx = get_be64(kk + 9);
        const uint8_t *val = (const uint8_t *)leveldb_iter_value(it, &vl);
        raft_entry e;
        if (idx != expect || raft_codec_entry_decode(val, vl, &e) || e.index != idx) {
            if (bad_index)
                *bad_index = idx != expect ? expect : idx;
            rc = RAFT_ERR_CORRUPT;
            break;
        }
        rc = fn ? fn(ctx, &e) : RAFT_OK;
        if (rc)
            break;
        expect++;
    }
    if (rc == RAFT_OK) {
        char *e = NULL;
        leveldb_iter_get_error(it, &e);
        if (e) {
            leveldb_free(e);
            rc = RAFT_ERR_IO;
        }
    }
    leveldb_iter_destroy(it);
    if (rc)
        return rc;
    if (hs->commit > expect - 1) {
        if (bad_index)
            *bad_index = hs->commit;
        return RAFT_ERR_CORRUPT;
    }
    bounds *b = find_bounds(s->b, s->nb, group);
    if (!b)
        b = add_bounds(&s->b, &s->nb, &s->capb, group);
    if (!b)
        return RAFT_ERR_NOMEM;
    b->first = snap->index + 1;
    b->last = expect - 1;
    return RAFT_OK;
}

/* raft_store_batch_new: contract (arguments, ownership, errors) in raft_log_store.h. */
int raft_store_batch_new(raft_store *s, raft_store_batch **out)
{
    raft_store_batch *b = calloc(1, sizeof *b);
    if (!b)
        return RAFT_ERR_NOMEM;
    b->s = s;
    b->wb = leveldb_writebatch_create();
    if (!b->wb) {
        free(b);
        return RAFT_ERR_NOMEM;
    }
    *out = b;
    return RAFT_OK;
}

/* raft_store_batch_free: contract (arguments, ownership, errors) in raft_log_store.h. */
void raft_store_batch_free(raft_store_batch *b)
{
    if (!b)
        return;
    if (b->wb)
        leveldb_writebatch_destroy(b->wb);
    free(b->b);
    free(b);
}

static void del_range(raft_store_batch *b, uint64_t group, uint64_t lo, uint64_t hi)
{
    uint8_t k[17];
    for (uint64_t i = lo; i <= hi && i >= lo; i++) {
        key_of(k, 'e', group, i);
        leveldb_writebatch_delete(b->wb, (const char *)k, 17);
    }
}

static void put_snap(raft_store_batch *b, uint64_t group, const raft_snap_meta *m)
{
    uint8_t k[17], v[RAFT_CODEC_SNAP_MAX];
    key_of(k, 's', group, 0);
    size_t n = raft_codec_snap_encode(m, v);
    leveldb_writebatch_put(b->wb, (const char *)k, 9, (const char *)v, n);
}

/* raft_store_batch_compact: contract (arguments, ownership, errors) in raft_log_store.h. */
int raft_store_batch_compact(raft_store_batch *b, uint64_t group, const raft_snap_meta *meta)
{
    bounds *x;
    int rc = batch_bounds(b, group, &x);
    if (rc)
        return rc;
    put_snap(b, group, meta);
    uint64_t hi = meta->index < x->last ? meta->index : x->last;
    if (x->first <= hi)
        del_range(b, group, x->first, hi);
    if (x->first <= meta->index)
        x->first = meta->index + 1;
    if (x->last < meta->index)
        x->last = meta->index;
    return RAFT_OK;
}

/* raft_store_batch_ready: contract (arguments, ownership, errors) in raft_log_store.h. */
int raft_store_batch_ready(raft_store_batch *b, uint64_t group, const raft_ready *rd)
{
    bounds *x;
    int rc = batch_bounds(b, group, &x);
    if (rc)
        return rc;
    if (rd->has_snap) {
        /* keep the durable suffix only if it continues the snapshot */
        int keep = 0;
        if (x->first <= rd->snap.index && rd->snap.index <= x->last) {
            uint8_t k[17];
            char *v;
            size_t vl;
            raft_entry e;
            rc = get_rec(b->s, k, key_of(k, 'e', group, rd->snap.index), &v, &vl);
            if (rc)
                return rc;
            if (v) {
                keep = raft_codec_entry_decode((const uint8_t *)v, vl, &e) == RAFT_OK &&
                       e.term == rd->snap.term;
                leveldb_free(v);
            }
        }
        put_snap(b, group, &rd->snap);
        uint64_t hi = keep ? rd->snap.index : x->last;
        if (x->first <= hi)
            del_range(b, group, x->first, hi);
        x->first = rd->snap.index + 1;
        if (!keep || x->last < rd->snap.index)
            x->last = rd->snap.index;
    }
    if (rd->n_entries) {
        uint64_t f = rd->entries[0].index;
        uint64_t nl = rd->entries[rd->n_entries - 1].index;
        if (nl < x->last)
            del_range(b, group, nl + 1, x->last);
        for (size_t i = 0; i < rd->n_entries; i++) {
            const raft_entry *e = &rd->entries[i];
            size_t n = raft_codec_entry_size(e);
            uint8_t *v = malloc(n);
            if (!v)
                return RAFT_ERR_NOMEM;
            raft_codec_entry_encode(e, v);
            uint8_t k[17];
            key_of(k, 'e', group, e->index);
            leveldb_writebatch_put(b->wb, (const char *)k, 17, (const char *)v, n);
            free(v);
        }
        if (x->last < x->first || f < x->first)
            x->first = f;
        x->last = nl;
    }
    if (rd->hs_changed) {
        uint8_t k[17], v[RAFT_CODEC_HS_LEN];
        key_of(k, 'h', group, 0);
        raft_codec_hs_encode(&rd->hs, v);
        leveldb_writebatch_put(b->wb, (const char *)k, 9, (const char *)v, sizeof v);
    }
    return RAFT_OK;
}

/* raft_store_commit: contract (arguments, ownership, errors) in raft_log_store.h. */
int raft_store_commit(raft_store_batch *b, char *err, size_t errlen)
{
    raft_store *s = b->s;
    char *e = NULL;
    leveldb_write(s->db, s->wo, b->wb, &e);
    int rc = RAFT_OK;
    if (e) {
        set_err(err, errlen, e);
        leveldb_free(e);
        rc = RAFT_ERR_IO;
    } else {
        for (size_t i = 0; i < b->nb; i++) {
            bounds *d = find_bounds(s->b, s->nb, b->b[i].group);
            if (!d)
                d = add_bounds(&s->b, &s->nb, &s->capb, b->b[i].group);
            if (d)
                *d = b->b[i]; /* else: not cached, rescanned on next use */
        }
    }
    raft_store_batch_free(b);
    return rc;
}
