/*
 * ldb.h — a thin, error-checked wrapper over leveldb's C API, shared by the
 * storage and index roles: open one database per partition, synced batch
 * writes, point reads, and ordered iteration within [lo, hi).
 */
#ifndef SX_LDB_H
#define SX_LDB_H

#include <stdatomic.h>
#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>
#include <leveldb/c.h>
#include "ldb_log.h"

typedef struct ldb {
    leveldb_t *db;
    leveldb_options_t *opts;
    leveldb_readoptions_t *ropts;
    leveldb_writeoptions_t *wsync; /* sync = true */
    leveldb_writeoptions_t *wlazy; /* sync = false */
    char *dir;                     /* the database's folder */
    leveldb_filterpolicy_t *filter;
    atomic_bool failed;   /* a write or a log sync failed (sticky):
                           * every later write is refused */
    atomic_bool refusing; /* that has been logged */
    ldb_logs logs;        /* new logs preallocated (ldb_log.h) */
} ldb;

/* The block cache every leveldb of a process shares (uncompressed table
 * blocks: a read that finds its block there neither reads the file nor
 * decompresses it). 128 MiB by default, so a local cluster's four nodes
 * hold at most 512 MiB between them; shardex-node --cache-mb sets it. */
#define LDB_CACHE_DEFAULT_MB 128
#define LDB_CACHE_MAX_MB (1024 * 1024)

/* Sets the shared block cache's size, 1..LDB_CACHE_MAX_MB MiB. Call it
 * before the process opens its first leveldb: once the cache exists only
 * its own size is accepted. Returns 0 or SX_EINVAL. */
int ldb_cache_configure(size_t mb);

/* The shared block cache's size in MiB (as configured, or the default). */
size_t ldb_cache_mb(void);

/* Opens (creating if missing) the database at dir. Returns 0 or SX_EIO with
 * leveldb's message logged. On success *out is owned by the caller. */
int ldb_open(const char *dir, ldb **out);

/* ldb_open; without create, a folder that holds no database is SX_EIO. */
int ldb_open_ex(const char *dir, bool create, ldb **out);

#define LDB_MEMTABLE_MIN_BYTES (1u << 20)

/* ldb_open with memtables of memtable_bytes (ldb_open's are 64 MiB): up
 * to two of them in memory under heavy writes, and each log preallocated
 * to that size. Returns 0, SX_EINVAL (under LDB_MEMTABLE_MIN_BYTES) or
 * SX_EIO. */
int ldb_open_mem(const char *dir, size_t memtable_bytes, ldb **out);

/* Closes the database and frees the handle; accepts NULL. */
void ldb_close(ldb *d);

/* Reads key. On success *val (malloc'd; caller frees with free()) and *vn
 * are set and 0 is returned; SX_ENOTFOUND when absent; SX_EIO on error. */
int ldb_get(ldb *d, const void *key, size_t kn, uint8_t **val, size_t *vn);

/* ldb_get as of snapshot snap (NULL: the current state). */
int ldb_get_snap(ldb *d, const leveldb_snapshot_t *snap, const void *key, size_t kn, uint8_t **val,
                 size_t *vn);

/* Writes the batch durably (fsync'd before returning). Returns 0 or SX_EIO:
 * a failed write, or any write once one write or log sync through d has
 * failed (fail-stop: the log may end in a torn record, after which nothing
 * may be appended; the node must restart to write here again). */
int ldb_write_sync(ldb *d, leveldb_writebatch_t *b);

/* Writes the batch without a sync: once this returns its bytes are in the
 * kernel (leveldb flushes its log writer after every record), so they
 * survive the process's crash but not the machine's until ldb_sync_logs
 * or a later synced write covers them. Returns 0 or SX_EIO (refused after
 * a failure, as ldb_write_sync). */
int ldb_write_lazy(ldb *d, leveldb_writebatch_t *b);

/* Makes every write made so far durable, including the unsynced ones:
 * fsyncs each log file (*.log) in the database's folder. A synced write
 * syncs only the current log, and leveldb never syncs a log it switched
 * away from (when a memtable fills) — its data is durable only once that
 * memtable is flushed to a table, which is synced, and then the log is
 * deleted (a log that vanished between the listing and its fsync is
 * skipped for that reason). Each log is opened anew to be synced, so an
 * earlier write-back error of its pages is reported here only by kernels
 * that report it to every descriptor (Linux 4.16 and later; Debian 12's
 * 6.1 does). Returns 0 or SX_EIO (logged); *synced counts the logs
 * fsynced. Index partitions sync every group this way (index_apply.c). */
int ldb_sync_logs(ldb *d, unsigned *synced);

/* Whether every write and log sync through d so far succeeded: false once
 * one failed (the kernel may have dropped the pages it could not write,
 * and reports that only once, to the descriptor that saw it), true
 * otherwise — and then a synced write of nothing, which leveldb refuses
 * once it met an error of its own (a failed log write or sync, or a
 * compaction's), must succeed too. For a clean stop that wants to vouch
 * for everything written before it. */
bool ldb_sound(ldb *d);

/* True once a write or a log sync through d has failed: d refuses every
 * write from then on (ldb_write_sync). For status. */
bool ldb_failed(ldb *d);

/* Makes a change to path's parent folder (a file created, renamed or
 * removed there) durable: fsyncs the folder. Returns 0 or SX_EIO (logged;
 * also for a path too long). */
int ldb_sync_parent(const char *path);

/* Marker files beside a database (a state that must survive a crash, kept
 * out of leveldb so that it can be read before leveldb opens):
 * ldb_marker_set creates path durably (the file and its folder synced),
 * ldb_marker_clear removes it (not synced: a marker that comes back after
 * a crash must be harmless), ldb_marker_state sets *exists; each returns
 * 0 or SX_EIO (logged: for ldb_marker_state, whether path exists cannot be
 * told). */
int ldb_marker_set(const char *path);
int ldb_marker_clear(const char *path);
int ldb_marker_state(const char *path, bool *exists);

/* Opens the existing database at dir once with leveldb's paranoid checks
 * off, so that its recovery skips what it cannot read in a log (a tail
 * torn by a machine crash while unsynced; records after a hole may be
 * kept too) instead of refusing to open, writes what it recovered to a
 * table and drops those logs (leveldb's own LOG file there says what it
 * dropped); then closes it. ldb_open afterwards finds clean logs. A
 * missing database is an error. Returns 0 or SX_EIO. */
int ldb_recover_lenient(const char *dir);

/* Ordered iteration over keys in [lo, hi) (hi_n == 0: to the end of the
 * keyspace), ascending or descending. The callback returns 0 to continue,
 * 1 to stop, or a negative/positive sx_err to abort (returned as is).
 * Key and value views are valid only during the call. snap may be NULL.
 * Returns 0, the callback's error, or SX_EIO. */
typedef int (*ldb_visit)(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn);
int ldb_scan(ldb *d, const leveldb_snapshot_t *snap, const void *lo, size_t lo_n, const void *hi,
             size_t hi_n, bool desc, ldb_visit fn, void *arg);

/* As ldb_scan, ascending, without filling the block cache (a one-time
 * sweep over much of the store must not evict what the workload reads,
 * nor grow the cache's memory with blocks read once). */
int ldb_scan_nocache(ldb *d, const leveldb_snapshot_t *snap, const void *lo, size_t lo_n,
                     const void *hi, size_t hi_n, ldb_visit fn, void *arg);

#endif
