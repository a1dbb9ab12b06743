/*
 * backfill.c — the index builds' driver for one fact partition: which
 * indexes to build and when (one scan for a table's new indexes, the same
 * ones seen for BF_SETTLE_MS, at most SHARDEX_BACKFILL_RUNNING partitions of a node
 * at once, a failed build retried after a growing delay), and the
 * CAT_BACKFILLED notification once a build's records and those of the
 * writes made meanwhile are at every destination. See backfill.h.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "backfill.h"
#include "bf_build.h"
#include "hash.h"
#include "log.h"
#include "msg.h"
#include "net.h"
#include "node.h"
#include "shipper.h"
#include "pgroup.h"
#include "storage_part.h"
#include "sx_errors.h"

/* Records a build holds before it sorts and emits them:
 * SHARDEX_BACKFILL_RUN_KB (1 KiB .. 2 GiB, in KiB) or 64 MiB, per partition
 * building (the arrays grow by doubling, so up to about twice that is
 * allocated). 64 MiB holds ~190,000 items of the benchmark's customers with
 * two indexes. */
#define BF_RUN_KB_DEFAULT (64L << 10)
#define BF_RUN_KB_MAX (2L << 20) /* below bf_sort.h's BF_RECS_MAX_BYTES */
/* Partitions of this node building at once: SHARDEX_BACKFILL_RUNNING
 * (1..64) or 2. Each holds a run in memory (so a node holds at most that
 * many runs) and keeps a core busy; the others wait for a later poll. */
#define BF_RUNNING_DEFAULT 2
#define BF_RUNNING_MAX 64
#define BF_BACKOFF_MAX_MS 60000 /* the longest wait before a failed build's retry */
/* How long a partition sees the same indexes to build before it starts
 * (two catalog polls at least: ST_POLL_MS, storage_node.c). */
#define BF_SETTLE_MS 100
#define BF_NOTIFY_TIMEOUT_MS 2000

static atomic_long run_kb, running_max; /* 0: not read yet */

/* Environment variable name (1..hi, else dflt, logged by os_env_long),
 * read once per process into *cache. */
static long env_once(atomic_long *cache, const char *name, long hi, long dflt)
{
    long v = atomic_load(cache);

    if (v == 0) {
        v = os_env_long(name, 1, hi, dflt);
        atomic_store(cache, v);
    }
    return v;
}

static void bf_notify(st_part *p, const cat_index *ix, catclient *cat)
{
    msg_CAT_BACKFILLED_req rq;
    msg_CAT_BACKFILLED_rep rep;
    uint8_t *frame = NULL, *resp = NULL;
    size_t fn = 0, rn = 0;
    char emsg[160] = "";
    int rc;

    memset(&rq, 0, sizeof(rq));
    memset(&rep, 0, sizeof(rep));
    rq.index_id = ix->id;
    rq.part = p->id;
    rc = msg_encode_req_bytes(MSG_CAT_BACKFILLED, &rq, &frame, &fn);
    if (rc == 0)
        rc = catclient_call(cat, frame, fn, BF_NOTIFY_TIMEOUT_MS, &resp, &rn);
    if (rc == 0)
        rc = msg_decode_rep(MSG_CAT_BACKFILLED, resp, rn, &rep, emsg, sizeof(emsg));
    msg_free_rep(MSG_CAT_BACKFILLED, &rep);
    if (rc == 0)
        LOG_INFO("partition %llu: index %u backfill shipped; catalog told (version %llu)",
                 (unsigned long long)p->id, ix->id, (unsigned long long)rep.version);
    else
        LOG_WARN("partition %llu: CAT_BACKFILLED for index %u failed: %s %s (will retry)",
                 (unsigned long long)p->id, ix->id, sx_strerror(rc), emsg);
    free(frame);
    free(resp);
}

static bool part_done(const cat_index *ix, uint64_t part)
{
    for (uint32_t i = 0; i < ix->ndone; i++)
        if (ix->done_parts[i] == part)
            return true;
    return false;
}

/* The recorded last seq of a backfill of index id, or false if none. */
static bool bf_lookup(st_part *p, uint32_t id, uint64_t *last)
{
    bool found = false;

    pthread_mutex_lock(&p->mu);
    for (uint32_t i = 0; i < p->nbf && !found; i++) {
        if (p->bf[i].index_id == id) {
            *last = p->bf[i].last_seq;
            found = true;
        }
    }
    pthread_mutex_unlock(&p->mu);
    return found;
}

/* Builds running on this node (its partitions' backfill threads). */
static atomic_int bf_running;

/* Counts one more build; false (logged once per wait, nothing counted)
 * when the most allowed already run: the partition tries again on a later
 * poll. A true is undone by bf_leave. */
static bool bf_enter(st_part *p)
{
    static _Thread_local bool told;
    int max = (int)env_once(&running_max, "SHARDEX_BACKFILL_RUNNING", BF_RUNNING_MAX,
                            BF_RUNNING_DEFAULT);

    if (atomic_fetch_add(&bf_running, 1) < max) {
        told = false;
        return true;
    }
    atomic_fetch_sub(&bf_running, 1);
    if (!told)
        LOG_INFO("partition %llu: index build waits: %d partition(s) of this node "
                 "building (SHARDEX_BACKFILL_RUNNING)",
                 (unsigned long long)p->id, max);
    told = true;
    return false;
}

static void bf_leave(void)
{
    atomic_fetch_sub(&bf_running, 1);
}

/* Where p stands with index ix: nothing to do (not building, or done for
 * p), a build to run (no backfill record), or built, waiting for its
 * records to ship (*last: the seq they must be acknowledged past). */
enum bf_need { BF_NONE, BF_BUILD, BF_SHIPPING };

static enum bf_need bf_need_of(st_part *p, const cat_index *ix, uint64_t *last)
{
    if (ix->state != CAT_BUILDING || part_done(ix, p->id))
        return BF_NONE;
    return bf_lookup(p, ix->id, last) ? BF_SHIPPING : BF_BUILD;
}

/* Tells the catalog that ix is backfilled on p when p has built it and the
 * records of the writes made during the build have shipped. */
static void bf_tell_if_shipped(st_part *p, const cat_index *ix, catclient *catpeer)
{
    uint64_t last = 0;

    if (bf_need_of(p, ix, &last) == BF_SHIPPING && p->ship != NULL &&
        ship_acked_all(p->ship, p, last))
        bf_notify(p, ix, catpeer);
}

/* A tag of the indexes p has yet to build under cat (0: none). */
static uint64_t build_tag(st_part *p, const cat_catalog *cat)
{
    uint64_t tag = 0, last;

    for (uint32_t ti = 0; ti < cat->ntables; ti++)
        for (uint32_t ii = 0; ii < cat->tables[ti].nindexes; ii++) {
            const cat_index *ix = &cat->tables[ti].indexes[ii];
            uint8_t id[4];

            if (bf_need_of(p, ix, &last) != BF_BUILD)
                continue;
            be_put32(id, ix->id);
            tag = tag * 31 + hash_fnv64(id, sizeof(id)) + 1;
        }
    return tag;
}

/* A table whose build failed on this partition: not before at_us again. */
typedef struct bf_retry {
    uint32_t tid;
    uint64_t at_us, backoff_ms; /* backoff_ms 0: slot free */
} bf_retry;

#define BF_RETRY_SLOTS 16

/* This thread's (partition's) retry slot for table tid, or NULL; with
 * make, a free slot (or, all taken, the one due soonest) is given to it. */
static bf_retry *retry_of(uint32_t tid, bool make)
{
    static _Thread_local bf_retry slot[BF_RETRY_SLOTS];
    bf_retry *spare = &slot[0];

    for (int i = 0; i < BF_RETRY_SLOTS; i++) {
        if (slot[i].backoff_ms != 0 && slot[i].tid == tid)
            return &slot[i];
        /* a free slot, else the one due soonest */
        if (spare->backoff_ms != 0 && (slot[i].backoff_ms == 0 || slot[i].at_us < spare->at_us))
            spare = &slot[i];
    }
    if (!make)
        return NULL;
    *spare = (bf_retry){ .tid = tid };
    return spare;
}

/* Runs a build of ix[0..nix) of table t unless its last one failed
 * too recently or too many run already; a failed build waits 1 s, doubling
 * to a minute, before the table is scanned again on this partition (an
 * unreadable item must not cost a whole scan every poll, nor hold back the
 * other tables). */
static void bf_start(st_part *p, const cat_catalog *cat, const cat_table *t, const cat_index **ix,
                     uint32_t nix)
{
    bf_retry *r = retry_of(t->id, false);
    size_t run_max;
    int rc;

    if (r != NULL && st_now_us() < r->at_us)
        return;
    if (!bf_enter(p))
        return;
    run_max = (size_t)env_once(&run_kb, "SHARDEX_BACKFILL_RUN_KB", BF_RUN_KB_MAX, BF_RUN_KB_DEFAULT)
              << 10;
    rc = bf_build(p, cat, t, ix, nix, run_max);
    bf_leave();
    if (rc == 0) {
        if (r != NULL)
            r->backoff_ms = 0;
        return;
    }
    if (node_should_stop())
        return;
    if (r == NULL)
        r = retry_of(t->id, true);
    r->backoff_ms = r->backoff_ms ? r->backoff_ms * 2 : 1000;
    if (r->backoff_ms > BF_BACKOFF_MAX_MS)
        r->backoff_ms = BF_BACKOFF_MAX_MS;
    r->at_us = st_now_us() + r->backoff_ms * 1000ull;
    LOG_WARN("partition %llu: index build of table %s failed (%s); next attempt in "
             "%llu s",
             (unsigned long long)p->id, t->name, sx_strerror(rc),
             (unsigned long long)r->backoff_ms / 1000);
}

void bf_step(st_part *p, const cat_catalog *cat, catclient *catpeer)
{
    /* the indexes to build as this thread (the partition's) last saw them,
     * and since when: a build starts once the same ones were seen for
     * BF_SETTLE_MS, so indexes created one after the other (each `index
     * create` a command) are built in one scan, at the price of that wait */
    static _Thread_local uint64_t seen, seen_us;
    uint64_t tag, now = os_mono_us();
    bool settled;

    if (cat == NULL)
        return;
    if (p->pg != NULL && pg_ready(p->pg) == 0)
        return; /* a replicated partition's leader builds its indexes */
    tag = build_tag(p, cat);
    if (tag != seen) {
        seen = tag;
        seen_us = now;
    }
    settled = now - seen_us >= BF_SETTLE_MS * 1000ull;
    pthread_mutex_lock(&p->wlock);
    st_part_use_catalog(p, cat);
    pthread_mutex_unlock(&p->wlock);
    for (uint32_t ti = 0; ti < cat->ntables; ti++) {
        const cat_table *t = &cat->tables[ti];
        const cat_index **build = NULL; /* the table's indexes to build */
        uint32_t nbuild = 0;

        for (uint32_t ii = 0; ii < t->nindexes; ii++) {
            const cat_index *ix = &t->indexes[ii];
            uint64_t last = 0;

            bf_tell_if_shipped(p, ix, catpeer);
            if (bf_need_of(p, ix, &last) != BF_BUILD)
                continue;
            if (build == NULL && (build = calloc(t->nindexes, sizeof(*build))) == NULL) {
                LOG_ERROR("partition %llu: backfill: out of memory (will retry)",
                          (unsigned long long)p->id);
                return;
            }
            build[nbuild++] = ix;
        }
        if (nbuild > 0 && settled) {
            bf_start(p, cat, t, build, nbuild);
            /* a build without writes beside it has nothing left to ship:
             * tell now rather than a poll later */
            for (uint32_t k = 0; k < nbuild; k++)
                bf_tell_if_shipped(p, build[k], catpeer);
        }
        free(build);
    }
}
