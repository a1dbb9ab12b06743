/*
 * index_sync.c — how an index partition's groups become durable (see
 * index_commit.h): the log sync every path shares (fail-stop on failure),
 * a group written and synced by the committer itself, and the syncer
 * thread of the pipelined group commit, which syncs the logs once for every
 * group the committer handed it meanwhile, publishes the state the last
 * one reached and answers their ops (index_apply.c has the committer).
 */
#include <stdlib.h>
#include <string.h>
#include "index_part.h"
#include "index_commit.h"
#include "log.h"
#include "sx_errors.h"

/* fsyncs every log of p (ldb_sync_logs, counting them in *synced), unless
 * a sync failed before; a failure makes the partition fail-stop
 * (p->seal_broken, reported once). Returns 0 or SX_EIO. The committer's
 * and the syncer's one way to make groups durable. */
int ix_sync_logs(ix_part *p, unsigned *synced)
{
    int rc = __atomic_load_n(&p->seal_broken, __ATOMIC_ACQUIRE) ? SX_EIO
                                                                : ldb_sync_logs(p->db, synced);

    if (rc != 0 && !__atomic_exchange_n(&p->seal_broken, true, __ATOMIC_ACQ_REL))
        LOG_ERROR("index p%llu: syncing the logs failed: this partition takes no more "
                  "writes until the node restarts",
                  (unsigned long long)p->id);
    return rc;
}

/* Under apply_mu, with the syncer holding nothing: writes a group's batch
 * b (index_part.h) and returns 0 or the write's error. A group of build
 * records only (lazy) is written unsynced, the marker file created durably
 * before the first one after a seal. Any other group is written, then
 * every log fsynced before this returns: on disk that is what leveldb's
 * synced write does (append, then sync), but the entries reach the
 * memtable first, so eventual and verified readers see them while the
 * sync runs (the index lag does not include it); nothing is
 * acknowledged, and no watermark published, before it returns. The sync
 * covers the build records written before (the marker's seal: with seal,
 * it is then removed, *seal_rc telling how that went). A failed sync fails
 * the group and every seal after it (p->seal_broken), and ldb refuses
 * every later write until the node restarts (index_part.h); the failed
 * group's entries stay readable until then (its watermarks are not
 * published, so no strong read and no source counts on them; verified
 * reads check every hit against its fact). */
int ix_write_group(ix_part *p, leveldb_writebatch_t *b, bool lazy, bool seal, int *seal_rc)
{
    unsigned synced = 0;
    int rc;

    *seal_rc = 0;
    if (!lazy || __atomic_load_n(&p->seal_broken, __ATOMIC_ACQUIRE)) {
        rc = ldb_write_lazy(p->db, b);
        if (rc == 0)
            rc = ix_sync_logs(p, &synced); /* fail-stop: see index_part.h */
        if (rc != 0 || !seal)
            return rc;
        if ((*seal_rc = ldb_marker_clear(p->unsealed)) != 0)
            return 0;
        p->build_open = false;
        __atomic_add_fetch(&p->seals, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&p->logs_synced, synced, __ATOMIC_RELAXED);
        return 0;
    }
    if (!p->build_open) {
        if ((rc = ldb_marker_set(p->unsealed)) != 0)
            return rc;
        p->build_open = true;
    }
    rc = ldb_write_lazy(p->db, b);
    if (rc == 0)
        __atomic_add_fetch(&p->lazy_groups, 1, __ATOMIC_RELAXED);
    return rc;
}

/* Publishes a state the partition reached (its synced groups'): the
 * nsrc watermarks and hw_seen values, the counters and, when dur is not
 * NULL, the watermarks of the last 'S' record now known synced (what
 * answers report as synced: index_part.h). */
void ix_publish(ix_part *p, const uint64_t *wm, const uint64_t *hw, uint64_t entries,
                uint64_t tombstones, const uint64_t *dur)
{
    pthread_mutex_lock(&p->state_mu);
    memcpy(p->wm, wm, sizeof(uint64_t) * (size_t)p->nsrc);
    memcpy(p->hw, hw, sizeof(uint64_t) * (size_t)p->nsrc);
    if (dur != NULL)
        memcpy(p->dur_wm, dur, sizeof(uint64_t) * (size_t)p->nsrc);
    p->entries = entries;
    p->tombstones = tombstones;
    pthread_mutex_unlock(&p->state_mu);
}

void ix_sync_drain(ix_part *p)
{
    pthread_mutex_lock(&p->sync_mu);
    while (p->w_head != NULL || p->syncer_busy)
        pthread_cond_wait(&p->drained_cv, &p->sync_mu);
    pthread_mutex_unlock(&p->sync_mu);
}

/* Hands written group w to the syncer. */
void ix_sync_hand(ix_part *p, ix_written *w)
{
    pthread_mutex_lock(&p->sync_mu);
    if (p->w_tail != NULL)
        p->w_tail->next = w;
    else
        p->w_head = w;
    p->w_tail = w;
    pthread_cond_signal(&p->sync_cv);
    pthread_mutex_unlock(&p->sync_mu);
}

/* Under apply_mu, after a written group: a record of it for the syncer,
 * with the state it reached (p->work_*), ops to answer after the sync and
 * the group's timings. NULL when out of memory. */
ix_written *ix_written_new(ix_part *p, ix_apply_op *ops, uint64_t nrec, uint64_t apply_us,
                           uint64_t write_us)
{
    size_t n = (size_t)p->nsrc;
    ix_written *w = calloc(1, sizeof(*w));

    if (w == NULL)
        return NULL;
    w->wm = malloc(3 * (n ? n : 1) * sizeof(uint64_t));
    if (w->wm == NULL) {
        free(w);
        return NULL;
    }
    w->hw = w->wm + n;
    w->s = w->hw + n;
    memcpy(w->wm, p->work_wm, n * sizeof(uint64_t));
    memcpy(w->hw, p->work_hw, n * sizeof(uint64_t));
    memcpy(w->s, p->s_wm, n * sizeof(uint64_t));
    w->entries = p->work_entries;
    w->tombstones = p->work_tombstones;
    w->ops = ops;
    w->nrec = nrec;
    w->apply_us = apply_us;
    w->write_us = write_us;
    return w;
}

/* Syncs the logs once for the written groups of list (in the order they
 * were written), publishes the state the last one reached and answers
 * their ops. A failed sync fails them all and every later group (the
 * partition's leveldb refuses writes from then on: index_part.h). */
static void sync_groups(ix_part *p, ix_written *list)
{
    unsigned long long t0 = os_mono_us(), us;
    unsigned synced = 0, skipped;
    uint64_t nrec = 0, apply_us = 0, write_us = 0;
    ix_written *w, *last = list, *nx;
    int rc, groups = 0;

    rc = ix_sync_logs(p, &synced);
    us = os_mono_us() - t0;
    for (w = list; w != NULL; w = w->next) {
        last = w;
        nrec += w->nrec;
        apply_us += w->apply_us;
        write_us += w->write_us;
        groups++;
    }
    if (rc == 0) {
        ix_publish(p, last->wm, last->hw, last->entries, last->tombstones, last->s);
        cstats_add(&p->commits, nrec, apply_us, write_us + us);
    }
    if (us >= SX_SLOW_MS * 1000ull && log_ratelimit_ok(&p->slow_sync, 1000, &skipped))
        LOG_WARN("index p%llu: slow sync: %llu ms for %d groups of %llu records (%u more "
                 "slow syncs since the last report)",
                 (unsigned long long)p->id, us / 1000, groups, (unsigned long long)nrec, skipped);
    for (w = list; w != NULL; w = nx) {
        nx = w->next;
        for (ix_apply_op *op = w->ops; op != NULL; op = op->next)
            op->err = rc;
        ix_finish_group(p, w->ops);
        free(w->wm);
        free(w);
    }
}

static void *syncer_main(void *arg)
{
    ix_part *p = arg;

    os_thread_name("sx-ix-sync");

    pthread_mutex_lock(&p->sync_mu);
    for (;;) {
        if (p->w_head == NULL) {
            p->syncer_busy = false;
            pthread_cond_broadcast(&p->drained_cv);
            if (p->syncer_quit)
                break;
            pthread_cond_wait(&p->sync_cv, &p->sync_mu);
            continue;
        }
        ix_written *list = p->w_head;

        p->w_head = p->w_tail = NULL;
        p->syncer_busy = true;
        pthread_mutex_unlock(&p->sync_mu);
        sync_groups(p, list);
        pthread_mutex_lock(&p->sync_mu);
    }
    pthread_mutex_unlock(&p->sync_mu);
    return NULL;
}

int ix_syncer_start(ix_part *p)
{
    if (pthread_create(&p->syncer, NULL, syncer_main, p) != 0)
        return SX_EINTERNAL;
    p->syncer_started = true;
    return 0;
}

void ix_syncer_stop(ix_part *p)
{
    pthread_mutex_lock(&p->sync_mu);
    p->syncer_quit = true;
    pthread_cond_signal(&p->sync_cv);
    pthread_mutex_unlock(&p->sync_mu);
    if (p->syncer_started)
        pthread_join(p->syncer, NULL);
    p->syncer_started = false;
}
