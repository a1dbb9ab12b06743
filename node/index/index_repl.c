/*
 * index_repl.c — a replicated index partition: its Raft group over the
 * partition's whole leveldb (pgroup.h), and the hooks that keep the
 * partition's published state (watermarks, hw_seen, counters) and its
 * absent-key filter in step with what its replica applies.
 *
 * The leader's committer computes each group exactly as an unreplicated
 * partition's does (index_apply.c) and proposes the batch; every replica
 * applies it. What an unreplicated partition needs its syncer, its 'S'
 * record, its unsealed-build marker and its epoch for (groups written
 * before their sync, build records never synced one by one) has no use
 * here: an entry is durable on a quorum before anyone is answered, so
 * every applied group is synced as far as its sources are concerned.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"
#include "index_part.h"
#include "keyfilter.h"
#include "log.h"
#include "pgroup.h"
#include "sx_errors.h"

/* The group's own keys ('R' is not an index prefix). */
static const uint8_t applied_key[2] = { 'R', 'a' };
static const uint8_t marker_key[2] = { 'R', 'i' };

typedef struct apply_st {
    ix_part *p;
    bool counts;
    uint64_t entries, tombstones;
} apply_st;

static int applied_rec(void *arg, bool del, const uint8_t *k, size_t kn, const uint8_t *v,
                       size_t vn)
{
    apply_st *a = arg;
    ix_part *p = a->p;

    if (kn == 0 || del)
        return 0;
    if (k[0] == IX_PFX_ENTRY && p->kf != NULL) {
        kf_add_key(p->kf, kf_key_of(p->id, k + 1, kn - 1));
    } else if (k[0] == IX_PFX_WM && kn == 9) {
        mp_cur c = mp_cur_make(v, vn);
        uint32_t cnt;
        uint64_t wm, hw;
        int j = ix_part_src_index(p, be_get64(k + 1));

        if (j >= 0 && mp_read_array(&c, &cnt) == 0 && cnt >= 2 && mp_read_u64(&c, &wm) == 0 &&
            mp_read_u64(&c, &hw) == 0) {
            pthread_mutex_lock(&p->state_mu);
            p->wm[j] = p->dur_wm[j] = wm;
            p->hw[j] = hw;
            pthread_mutex_unlock(&p->state_mu);
        }
    } else if (k[0] == IX_PFX_COUNT && kn == 1) {
        mp_cur c = mp_cur_make(v, vn);
        uint32_t cnt;

        a->counts = mp_read_array(&c, &cnt) == 0 && cnt >= 2 && mp_read_u64(&c, &a->entries) == 0 &&
                    mp_read_u64(&c, &a->tombstones) == 0;
    }
    return 0;
}

static void on_applied(void *arg, const uint8_t *recs, size_t n)
{
    apply_st a = { .p = arg };

    if (pg_records_each(recs, n, applied_rec, &a) != 0 || !a.counts)
        return;
    pthread_mutex_lock(&a.p->state_mu);
    a.p->entries = a.entries;
    a.p->tombstones = a.tombstones;
    pthread_mutex_unlock(&a.p->state_mu);
}

/* Tells the filter of every entry key (after a snapshot replaced them). */
static int filter_visit(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    ix_part *p = arg;

    (void)v;
    (void)vn;
    if (kn > 1)
        kf_add_key(p->kf, kf_key_of(p->id, k + 1, kn - 1));
    return 0;
}

static int on_reloaded(void *arg)
{
    ix_part *p = arg;
    uint8_t lo = IX_PFX_ENTRY, hi = IX_PFX_ENTRY + 1;
    int rc = ix_part_reload(p);

    if (rc == 0 && p->kf != NULL)
        rc = ldb_scan_nocache(p->db, NULL, &lo, 1, &hi, 1, filter_visit, p);
    if (rc != 0)
        LOG_ERROR("index p%llu: cannot reload its state: %s", (unsigned long long)p->id,
                  sx_strerror(rc));
    return rc == 0 ? 0 : -1;
}

static void on_leading(void *arg, uint64_t term)
{
    ix_part *p = arg;

    if (term != 0)
        LOG_INFO("index p%llu: this replica leads (term %llu): it applies and serves",
                 (unsigned long long)p->id, (unsigned long long)term);
}

int ix_part_replicate(ix_part *p, repl *r, const char *data_dir)
{
    char dir[4096], what[64];

    snprintf(dir, sizeof dir, "%s/p%llu.raft", data_dir, (unsigned long long)p->id);
    snprintf(what, sizeof what, "index partition %llu", (unsigned long long)p->id);
    pg_config c = {
        .group = p->id,
        .nodes = p->cp->rep,
        .n = p->cp->nrep,
        .db = p->db,
        .marker = marker_key,
        .marker_n = sizeof marker_key,
        .akey = applied_key,
        .akey_n = sizeof applied_key,
        .dir = dir,
        .what = what,
        .hooks = { p, on_applied, on_reloaded, on_leading },
    };
    return pg_open(r, &c, &p->pg);
}

int ix_part_leading(ix_part *p, uint64_t *term)
{
    int hint;

    return pg_lead(p->pg, term, &hint);
}

int ix_part_durable(ix_part *p, leveldb_writebatch_t *b, uint64_t term)
{
    int hint;

    if (p->pg == NULL)
        return ldb_write_sync(p->db, b);
    return term == 0 ? pg_commit_ready(p->pg, b, &hint) : pg_commit(p->pg, b, term, &hint);
}

int ix_part_read_barrier(ix_part *p, int *hint)
{
    *hint = 0;
    return p->pg == NULL ? 0 : pg_read_barrier(p->pg, hint);
}

int ix_part_leader_hint(const ix_part *p)
{
    return p->pg != NULL ? pg_leader_hint(p->pg) : 0;
}
