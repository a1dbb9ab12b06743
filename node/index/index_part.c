/*
 * index_part.c — opening, loading and closing one index partition; the
 * stored entry format; published state. Applying lives in index_apply.c,
 * reading in index_read.c, tombstone collection in index_gc.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "index_part.h"
#include "keyfilter_load.h"
#include "hash.h"
#include "log.h"
#include "pgroup.h"
#include "sx_errors.h"

size_t ix_ekey(uint8_t *k, const uint8_t *local, size_t ln)
{
    k[0] = IX_PFX_ENTRY;
    memcpy(k + 1, local, ln);
    return 1 + ln;
}

size_t ix_tkey(uint8_t *k, uint64_t version, const uint8_t *local, size_t ln)
{
    k[0] = IX_PFX_TOMB;
    be_put64(k + 1, version);
    memcpy(k + 9, local, ln);
    return 9 + ln;
}

void ix_entry_encode(mp_buf *out, bool live, uint64_t version, uint64_t h, mp_span proj)
{
    mp_put_array(out, 4);
    mp_put_bool(out, live);
    mp_put_u64(out, version);
    mp_put_u64(out, h);
    if (proj.n == 0)
        mp_put_nil(out);
    else
        mp_put_raw(out, proj.p, proj.n);
}

int ix_entry_decode(const uint8_t *v, size_t n, ix_entry *e)
{
    mp_cur c = mp_cur_make(v, n);
    mp_val b;
    uint32_t cnt;

    if (mp_read_array(&c, &cnt) != 0 || cnt < 4)
        return SX_EIO;
    if (mp_read(&c, &b) != 0 || b.kind != MP_BOOL)
        return SX_EIO;
    e->live = b.b;
    if (mp_read_u64(&c, &e->version) != 0 || mp_read_u64(&c, &e->h) != 0)
        return SX_EIO;
    if (mp_read_raw(&c, &e->proj) != 0)
        return SX_EIO;
    return 0;
}

int ix_put_counts(leveldb_writebatch_t *b, uint64_t entries, uint64_t tombstones)
{
    mp_buf vb;
    uint8_t key = IX_PFX_COUNT;

    mp_buf_init(&vb);
    mp_put_array(&vb, 2);
    mp_put_u64(&vb, entries);
    mp_put_u64(&vb, tombstones);
    if (vb.oom) {
        mp_buf_free(&vb);
        return SX_ENOMEM;
    }
    leveldb_writebatch_put(b, (const char *)&key, 1, vb.sb.data, vb.sb.size);
    mp_buf_free(&vb);
    return 0;
}

int ix_commit_removal(ix_part *p, leveldb_writebatch_t *b, uint64_t live, uint64_t tombs)
{
    uint64_t entries, tombstones;
    int rc;

    ix_sync_drain(p);      /* the counters of every written group published */
    p->work_valid = false; /* the committer's next group starts from these */
    ix_part_state(p, &entries, &tombstones, NULL, NULL);
    entries = entries >= live ? entries - live : 0;
    tombstones = tombstones >= tombs ? tombstones - tombs : 0;
    rc = ix_put_counts(b, entries, tombstones);
    if (rc == 0)
        rc = ix_part_durable(p, b, 0);
    if (rc == 0) {
        pthread_mutex_lock(&p->state_mu);
        p->entries = entries;
        p->tombstones = tombstones;
        pthread_mutex_unlock(&p->state_mu);
    }
    return rc;
}

int ix_part_src_index(const ix_part *p, uint64_t source)
{
    int i;

    for (i = 0; i < p->nsrc; i++)
        if (p->src[i] == source)
            return i;
    return -1;
}

void ix_part_state(ix_part *p, uint64_t *entries, uint64_t *tombstones, uint64_t *wm, uint64_t *hw)
{
    pthread_mutex_lock(&p->state_mu);
    if (entries)
        *entries = p->entries;
    if (tombstones)
        *tombstones = p->tombstones;
    if (wm)
        memcpy(wm, p->wm, sizeof(*wm) * (size_t)p->nsrc);
    if (hw)
        memcpy(hw, p->hw, sizeof(*hw) * (size_t)p->nsrc);
    pthread_mutex_unlock(&p->state_mu);
}

/* ---- loading ---- */

typedef struct wm_rec {
    uint64_t src, wm, hw;
} wm_rec;

typedef struct wm_load {
    wm_rec *v;
    int n, cap;
} wm_load;

static int load_wm_visit(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    wm_load *l = arg;
    mp_cur c = mp_cur_make(v, vn);
    uint32_t cnt;
    wm_rec r;

    if (kn != 9 || mp_read_array(&c, &cnt) != 0 || cnt < 2 || mp_read_u64(&c, &r.wm) != 0 ||
        mp_read_u64(&c, &r.hw) != 0) {
        LOG_ERROR("index: corrupt watermark record (key %zu bytes)", kn);
        return SX_EIO;
    }
    r.src = be_get64(k + 1);
    if (l->n == l->cap) {
        int nc = l->cap ? l->cap * 2 : 16;
        wm_rec *nv = realloc(l->v, sizeof(*nv) * (size_t)nc);

        if (nv == NULL)
            return SX_ENOMEM;
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = r;
    return 0;
}

typedef struct count_load {
    uint64_t live, tomb;
} count_load;

static int count_visit(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    count_load *cl = arg;
    ix_entry e;

    (void)k;
    (void)kn;
    if (ix_entry_decode(v, vn, &e) != 0) {
        LOG_ERROR("index: corrupt entry value while counting");
        return SX_EIO;
    }
    if (e.live)
        cl->live++;
    else
        cl->tomb++;
    return 0;
}

/* Counts the entries and tombstones by one scan into p's counters. */
static int count_entries(ix_part *p)
{
    uint8_t lo = IX_PFX_ENTRY, hi = IX_PFX_ENTRY + 1;
    count_load cl = { 0, 0 };
    /* past the block cache: a sweep would only evict what reads use */
    int rc = ldb_scan_nocache(p->db, NULL, &lo, 1, &hi, 1, count_visit, &cl);

    p->entries = cl.live;
    p->tombstones = cl.tomb;
    return rc;
}

/* Reads the counters record, or counts entries by one scan. */
static int load_counts(ix_part *p)
{
    uint8_t key = IX_PFX_COUNT, *v = NULL;
    size_t vn = 0;
    int rc = ldb_get(p->db, &key, 1, &v, &vn);

    if (rc == 0) {
        mp_cur c = mp_cur_make(v, vn);
        uint32_t cnt;

        if (mp_read_array(&c, &cnt) != 0 || cnt < 2 || mp_read_u64(&c, &p->entries) != 0 ||
            mp_read_u64(&c, &p->tombstones) != 0)
            rc = SX_EIO;
        free(v);
        return rc;
    }
    return rc == SX_ENOTFOUND ? count_entries(p) : rc;
}

/* After a crash with the marker there (unsealed build records,
 * index_part.h): the counters are counted again (the record may count lost
 * entries) and written synced, then the marker goes. */
static int recount_unsealed(ix_part *p)
{
    leveldb_writebatch_t *b;
    int rc = count_entries(p);

    if (rc != 0)
        return rc;
    if ((b = leveldb_writebatch_create()) == NULL)
        return SX_ENOMEM;
    rc = ix_put_counts(b, p->entries, p->tombstones);
    if (rc == 0)
        rc = ldb_write_sync(p->db, b);
    leveldb_writebatch_destroy(b);
    if (rc == 0)
        rc = ldb_marker_clear(p->unsealed);
    if (rc == 0)
        LOG_INFO("index p%llu: a build was unsealed at the last stop: counted %llu "
                 "entries, %llu tombstones again",
                 (unsigned long long)p->id, (unsigned long long)p->entries,
                 (unsigned long long)p->tombstones);
    return rc;
}

/* Builds the source list: config storage partitions, then disk-only ids. */
static int load_sources(ix_part *p, const cfg_cluster *cfg)
{
    wm_load l = { NULL, 0, 0 };
    uint8_t lo = IX_PFX_WM, hi = IX_PFX_WM + 1;
    int rc, i, cap;

    rc = ldb_scan(p->db, NULL, &lo, 1, &hi, 1, false, load_wm_visit, &l);
    if (rc != 0)
        goto out;
    cap = cfg->nstorage + l.n;
    p->src = calloc((size_t)cap + 1, sizeof(uint64_t));
    p->wm = calloc((size_t)cap + 1, sizeof(uint64_t));
    p->hw = calloc((size_t)cap + 1, sizeof(uint64_t));
    p->work_wm = calloc((size_t)cap + 1, sizeof(uint64_t));
    p->work_hw = calloc((size_t)cap + 1, sizeof(uint64_t));
    p->work_dirty = calloc((size_t)cap + 1, sizeof(bool));
    p->dur_wm = calloc((size_t)cap + 1, sizeof(uint64_t));
    p->s_wm = calloc((size_t)cap + 1, sizeof(uint64_t));
    p->s_hw = calloc((size_t)cap + 1, sizeof(uint64_t));
    if (!p->src || !p->wm || !p->hw || !p->work_wm || !p->work_hw || !p->work_dirty || !p->dur_wm ||
        !p->s_wm || !p->s_hw) {
        rc = SX_ENOMEM;
        goto out;
    }
    for (i = 0; i < cfg->nstorage; i++)
        p->src[p->nsrc++] = cfg->storage[i].id;
    p->ncfg = p->nsrc;
    for (i = 0; i < l.n; i++) {
        int j = ix_part_src_index(p, l.v[i].src);

        if (j < 0) {
            j = p->nsrc++;
            p->src[j] = l.v[i].src;
            LOG_WARN("index p%llu: watermark for source %llu not in the config",
                     (unsigned long long)p->id, (unsigned long long)l.v[i].src);
        }
        p->wm[j] = l.v[i].wm;
        p->hw[j] = l.v[i].hw;
    }
out:
    free(l.v);
    return rc;
}

/* Takes the watermarks and hw_seen values from the 'S' record (index_part.h):
 * what is known on disk whatever a crash lost of the groups written after
 * the last sync; a source it lacks starts from 0. Without one (a partition
 * that never wrote one), the 'W' records stand. Sets dur_wm
 * and the 'S' record last written. Returns 0, SX_EIO (corrupt), SX_ENOMEM. */
static int load_synced(ix_part *p)
{
    static const uint8_t key = IX_PFX_SYNCED;
    size_t n = (size_t)p->nsrc;
    uint8_t *v = NULL;
    size_t vn = 0;
    uint32_t cnt = 0;
    bool back = false;
    int rc = ldb_get(p->db, &key, 1, &v, &vn);

    if (rc == SX_ENOTFOUND || (rc == 0 && p->cp->nrep > 1)) {
        /* a replicated partition's 'W' records are its applied state
         * (index_repl.c) */
        free(v);
        rc = 0;
        goto done;
    }
    if (rc != 0)
        return rc;
    mp_cur c = mp_cur_make(v, vn);
    uint64_t *sw = calloc(n + 1, sizeof(uint64_t)), *sh = calloc(n + 1, sizeof(uint64_t));

    if (sw == NULL || sh == NULL) {
        rc = SX_ENOMEM;
    } else if (mp_read_array(&c, &cnt) != 0 || cnt % 3 != 0) {
        rc = SX_EIO;
    } else {
        for (uint32_t i = 0; rc == 0 && i < cnt; i += 3) {
            uint64_t src, wm, hw;
            int j;

            if (mp_read_u64(&c, &src) != 0 || mp_read_u64(&c, &wm) != 0 ||
                mp_read_u64(&c, &hw) != 0)
                rc = SX_EIO;
            else if ((j = ix_part_src_index(p, src)) >= 0) {
                sw[j] = wm;
                sh[j] = hw;
            }
        }
    }
    if (rc == SX_EIO)
        LOG_ERROR("index p%llu: corrupt synced-state record", (unsigned long long)p->id);
    for (size_t j = 0; rc == 0 && j < n; j++) {
        back = back || sw[j] < p->wm[j];
        if (sw[j] < p->wm[j])
            p->wm[j] = sw[j];
        if (sh[j] < p->hw[j])
            p->hw[j] = sh[j];
    }
    free(sw);
    free(sh);
    free(v);
    if (rc != 0)
        return rc;
    if (back)
        LOG_WARN("index p%llu: the last stop was not clean: watermarks taken from the last "
                 "synced state; the sources ship again what follows it",
                 (unsigned long long)p->id);
done:
    memcpy(p->dur_wm, p->wm, n * sizeof(uint64_t));
    memcpy(p->s_wm, p->wm, n * sizeof(uint64_t));
    memcpy(p->s_hw, p->hw, n * sizeof(uint64_t));
    return rc;
}

int ix_part_reload(ix_part *p)
{
    wm_load l = { NULL, 0, 0 };
    uint8_t lo = IX_PFX_WM, hi = IX_PFX_WM + 1;
    size_t n = (size_t)p->nsrc;
    int rc = ldb_scan(p->db, NULL, &lo, 1, &hi, 1, false, load_wm_visit, &l);

    if (rc == 0) {
        pthread_mutex_lock(&p->state_mu);
        rc = load_counts(p); /* fills p's counters */
        memset(p->wm, 0, n * sizeof(uint64_t));
        memset(p->hw, 0, n * sizeof(uint64_t));
        for (int i = 0; i < l.n; i++) {
            int j = ix_part_src_index(p, l.v[i].src);

            if (j >= 0) {
                p->wm[j] = l.v[i].wm;
                p->hw[j] = l.v[i].hw;
            }
        }
        memcpy(p->dur_wm, p->wm, n * sizeof(uint64_t));
        pthread_mutex_unlock(&p->state_mu);
    }
    free(l.v);
    return rc;
}

int ix_put_synced(ix_part *p, leveldb_writebatch_t *b, const uint64_t *wm, const uint64_t *hw)
{
    static const uint8_t key = IX_PFX_SYNCED;
    mp_buf vb;
    int rc;

    mp_buf_init(&vb);
    mp_put_array(&vb, 3u * (uint32_t)p->nsrc);
    for (int j = 0; j < p->nsrc; j++) {
        mp_put_u64(&vb, p->src[j]);
        mp_put_u64(&vb, wm[j]);
        mp_put_u64(&vb, hw[j]);
    }
    rc = vb.oom ? SX_ENOMEM : 0;
    if (rc == 0)
        leveldb_writebatch_put(b, (const char *)&key, 1, vb.sb.data, vb.sb.size);
    mp_buf_free(&vb);
    return rc;
}

/* A clean close: every group is synced and published, so the 'S' record
 * becomes the final state (the next open then ships nothing again).
 * Failing leaves the older one, which only costs redeliveries. */
static void write_final_synced(ix_part *p)
{
    leveldb_writebatch_t *b;

    if (p->db == NULL || p->wm == NULL || ldb_failed(p->db) || p->cp->nrep > 1 ||
        (b = leveldb_writebatch_create()) == NULL)
        return; /* (a replica's keys change only by its group's entries) */
    if (ix_put_synced(p, b, p->wm, p->hw) == 0 && ldb_write_sync(p->db, b) != 0)
        LOG_WARN("index p%llu: could not record its final state: the next start ships "
                 "some records again",
                 (unsigned long long)p->id);
    leveldb_writebatch_destroy(b);
}

/* The partition's absent-key filter over its entry keys ('E' | local),
 * holding local keys; filled by a background scan (keyfilter_load.h).
 * A filter that cannot be set up is logged and left out. */
static void filter_start(ix_part *p)
{
    kf_range r;
    char what[48];

    memset(&r, 0, sizeof(r));
    r.lo[0] = IX_PFX_ENTRY;
    r.hi[0] = IX_PFX_ENTRY + 1;
    r.lo_n = r.hi_n = 1;
    r.skip = 1;
    r.part = p->id;
    snprintf(what, sizeof(what), "index p%llu", (unsigned long long)p->id);
    kf_load_start(p->db, &r, 1, p->entries + p->tombstones, what, &p->kf, &p->kf_load);
}

int ix_part_open(const cfg_cluster *cfg, const cfg_part *cp, const char *data_dir, ix_part **out)
{
    ix_part *p = calloc(1, sizeof(*p));
    char path[4096];
    bool unsealed;
    int rc;

    if (p == NULL)
        return SX_ENOMEM;
    p->id = cp->id;
    p->cp = cp;
    pthread_mutex_init(&p->state_mu, NULL);
    pthread_mutex_init(&p->apply_mu, NULL);
    pthread_mutex_init(&p->q_mu, NULL);
    pthread_cond_init(&p->commit_cv, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    pthread_mutex_init(&p->sync_mu, NULL);
    pthread_cond_init(&p->sync_cv, NULL);
    pthread_cond_init(&p->drained_cv, NULL);
    if (snprintf(path, sizeof(path), "%s/p%llu", data_dir, (unsigned long long)cp->id) >=
        (int)sizeof(path)) {
        rc = SX_EINVAL;
        goto fail;
    }
    if ((p->unsealed = malloc(strlen(path) + sizeof(".unsealed"))) == NULL) {
        rc = SX_ENOMEM;
        goto fail;
    }
    sprintf(p->unsealed, "%s.unsealed", path);
    if ((rc = ldb_marker_state(p->unsealed, &unsealed)) != 0)
        goto fail;
    p->recovered = unsealed;
    if (unsealed) {
        LOG_WARN("index p%llu: a build was unsealed at the last stop (%s): recovering "
                 "its logs leniently (what leveldb drops, its LOG says), then counting the "
                 "entries again",
                 (unsigned long long)cp->id, p->unsealed);
        rc = ldb_recover_lenient(path);
        if (rc != 0)
            goto fail;
    }
    rc = ldb_open(path, &p->db);
    if (rc != 0)
        goto fail;
    rc = load_sources(p, cfg);
    if (rc == 0)
        rc = load_synced(p);
    if (rc != 0)
        goto fail;
    rc = unsealed ? recount_unsealed(p) : load_counts(p);
    if (rc != 0)
        goto fail;
    filter_start(p); /* optional: without it every apply reads */
    rc = ix_committer_start(p);
    if (rc != 0)
        goto fail;
    p->opened = true;
    LOG_INFO("index p%llu open at %s: %llu entries, %llu tombstones, %d sources",
             (unsigned long long)p->id, path, (unsigned long long)p->entries,
             (unsigned long long)p->tombstones, p->nsrc);
    *out = p;
    return 0;
fail:
    LOG_ERROR("index p%llu: cannot open at %s: %s", (unsigned long long)cp->id, path,
              sx_strerror(rc));
    ix_part_close(p);
    return rc;
}

bool ix_part_close(ix_part *p)
{
    unsigned synced = 0;
    bool sealed;

    if (p == NULL)
        return true;
    ix_committer_stop(p);
    if (p->opened)
        write_final_synced(p);
    /* a clean stop seals what a build left unsealed: the next open then
     * needs neither the lenient recovery nor the recount, and the node
     * keeps its epoch, so the builds go on (ix_epoch.h) */
    if (p->build_open && !__atomic_load_n(&p->seal_broken, __ATOMIC_ACQUIRE) &&
        ldb_sync_logs(p->db, &synced) == 0 && ldb_marker_clear(p->unsealed) == 0)
        p->build_open = false;
    /* a failed write or sync may have lost unsealed records even where a
     * later sync succeeded (the kernel reports a lost page once) */
    sealed = !p->build_open && p->db != NULL && ldb_sound(p->db);
    if (!sealed)
        LOG_WARN("index p%llu: closed with build records unsealed or after a failed write "
                 "or sync: the node will not keep its epoch",
                 (unsigned long long)p->id);
    kf_load_stop(p->kf_load);
    kf_destroy(p->kf);
    pg_close(p->pg);
    ldb_close(p->db);
    free(p->src);
    free(p->wm);
    free(p->hw);
    free(p->work_wm);
    free(p->work_hw);
    free(p->work_dirty);
    free(p->dur_wm);
    free(p->s_wm);
    free(p->s_hw);
    free(p->unsealed);
    pthread_mutex_destroy(&p->state_mu);
    pthread_mutex_destroy(&p->apply_mu);
    pthread_mutex_destroy(&p->q_mu);
    pthread_cond_destroy(&p->commit_cv);
    pthread_cond_destroy(&p->done_cv);
    pthread_mutex_destroy(&p->sync_mu);
    pthread_cond_destroy(&p->sync_cv);
    pthread_cond_destroy(&p->drained_cv);
    free(p);
    return sealed;
}
