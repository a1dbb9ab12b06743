/*
 * storage_store.h — the storage node's one leveldb, shared by all its fact
 * partitions, and the node's committer thread.
 *
 * Every key of partition ID is stored as ID (8 bytes, big-endian) | the
 * partition-local key (storage_part.h lists those); storage_part.c's st_k*
 * functions add and strip the prefix, so partition code speaks local keys
 * only. One leveldb per node means one write-ahead log, and so ONE fsync
 * per commit group however many partitions the group touches: the node's
 * committer (storage_write.c) takes the writes queued on every partition,
 * applies each partition's share under that partition's write lock, and
 * syncs them all as one batch.
 *
 * Layout on disk: DATA/store. A data directory in the per-partition
 * layout (one leveldb per partition, DATA/p<ID>) is copied into the store when
 * the node starts (st_store_migrate), then renamed DATA/p<ID>.migrated.
 */
#ifndef SX_STORAGE_STORE_H
#define SX_STORAGE_STORE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include "commit_stats.h"
#include "ldb.h"
#include "log.h"
#include "mp.h"

struct st_part;

/* Bytes of the partition-id prefix before every partition-local key. */
#define ST_PFX_LEN 8

typedef struct st_store {
    ldb *db; /* unsynced writes: ldb_write_lazy */

    /* the committer (storage_write.c) */
    struct st_part **parts; /* borrowed, set by st_store_start */
    int nparts;
    pthread_mutex_t mu; /* guards the flags below */
    pthread_cond_t cv;  /* work for the committer, or quit */
    bool work;          /* a partition queued writes since the
                         * committer last took the queues */
    bool idle;          /* the committer waits on cv */
    bool quit;
    bool started;
    pthread_t committer;
    void *grp;            /* the committer's per-partition scratch */
    log_ratelimit slow;   /* committer only: slow-group warnings */
    commit_stats commits; /* the committer's figures, for status */
    uint64_t late;        /* writes refused past their deadline
                           * (atomic access; status:
                           * "writes_past_deadline") */

    struct ixroute *ixr; /* the routes to index partition leaders that
                          * the node's backfills share (ixroute.h), or
                          * NULL (each builds its own); freed by
                          * st_store_close */

    /* the absent-key filter (storage_filter.c) */
    struct keyfilter *kf;      /* NULL: none (every write reads) */
    struct kf_loader *kf_load; /* the scan that fills it */
} st_store;

/* The store's memtables: twice an index partition's 64 MiB, since a write
 * puts its outbox chunk beside its fact (with an index projecting whole
 * items, about as many bytes again). Its keys are hashed, so each memtable
 * flushed after the first overlaps the whole store and soon sets off a
 * compaction that rewrites it: fewer, larger flushes rewrite it less
 * often. A maintained load of 1,000,000 items with 2 indexes flushed 3-4
 * memtables a store and compacted ~110 MB in each with 64 MiB, 1-2 and
 * nothing with 128 MiB (docs/PERFORMANCE.md). The cost: up to
 * 256 MiB of memtables under heavy writes, and up to 128 MiB of log to
 * replay (and preallocated) per storage node. */
#define ST_MEMTABLE_BYTES (128u << 20)

/* Opens (creating) the store's leveldb at dir. Returns 0, SX_EIO or
 * SX_ENOMEM; *out is freed by st_store_close. */
int st_store_open(const char *dir, st_store **out);

/* Closes the store (its committer must be stopped); accepts NULL. */
void st_store_close(st_store *s);

/* Copies the partition leveldb at old_dir (the per-partition layout)
 * into s under partition id's prefix, synced, then renames old_dir
 * to old_dir.migrated and syncs that rename. Safe to repeat after a crash
 * before the rename: the copy overwrites with the same records. A folder
 * that holds no leveldb is refused, never opened as a new empty one.
 * Returns 0, SX_EIO, SX_ENOMEM or SX_EINVAL (path too long); on error
 * old_dir keeps its name (unless only the rename's sync failed). */
int st_store_migrate(st_store *s, const char *old_dir, uint64_t id);

/* Starts the node's committer over parts[0..n-1] (borrowed; they must
 * outlive it). Returns 0, SX_ENOMEM or SX_EINTERNAL. In storage_write.c. */
int st_store_start(st_store *s, struct st_part **parts, int n);

/* Creates the store's absent-key filter (sized by the partitions' item
 * counts; none when SHARDEX_KEYFILTER_MB is 0, or when it cannot be set up:
 * logged, and every write reads) and starts the scan that fills it. Called
 * by st_store_start, after s->parts is set. In storage_filter.c. */
void st_filter_start(st_store *s);

/* Stops the filter's scan (if it still runs) and frees the filter. Called
 * by st_store_stop once the committer has stopped. In storage_filter.c. */
void st_filter_stop(st_store *s);

/* Appends to status map b the key "keyfilter" and the filter's state: a
 * map {on, ready, keys, spared, bytes} (on false, the rest 0, when there
 * is no filter). In storage_filter.c. */
void st_filter_status(st_store *s, mp_buf *b);

/* Stops the committer after it has committed what is queued (partitions
 * refuse new writes first: their `stopping` is set). Accepts a store
 * whose committer never started. In storage_write.c. */
void st_store_stop(st_store *s);

#endif
