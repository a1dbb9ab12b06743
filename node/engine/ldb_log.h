/*
 * ldb_log.h — leveldb's log files, made cheaper to sync: each new log is
 * preallocated, and the zeros that leaves after its last record are
 * trimmed before the database is opened again.
 *
 * Why: leveldb appends each record to its log, so every synced write grows
 * the file, and an fdatasync after an append must also write the blocks
 * just allocated and the inode's new size: on ext4 (measured on this
 * project's hosts, docs/PERFORMANCE.md) four waits on the disk
 * instead of two, ~180 against ~100-120 µs a sync at rest and up to twice
 * that under load. PostgreSQL preallocates its WAL segments for the same
 * reason. leveldb 1.23 has no option for it, so the log is preallocated
 * from outside: fallocate(2) in its plain mode allocates blocks and moves
 * the file's size past leveldb's writes without touching a byte already
 * written, so it is safe while leveldb writes (leveldb writes at its own
 * file offset, never with O_APPEND). The region it adds reads as zeros,
 * which leveldb's log reader skips (it takes a zero header for
 * preallocated space) — except right after a record whose fragments were
 * not all written (a process killed half-way through a large batch), where
 * it reports "error in middle of record" and a paranoid open fails;
 * without preallocation the file would have ended there and the torn
 * record been dropped. So before each open the zero tail is cut off
 * (ldb_logs_trim), which gives leveldb the file it would have had.
 */
#ifndef SX_LDB_LOG_H
#define SX_LDB_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* One database's share of the watch. */
typedef struct ldb_logs {
    int wd;     /* its inotify watch (-1: none) */
    int lockfd; /* LOCK.shardex in its folder, flocked (-1: none) */
} ldb_logs;

/* Before leveldb opens folder dir: takes the folder's lock (an exclusive
 * flock on dir/LOCK.shardex, held until ldb_logs_close: the cut below must
 * never run on a log a live database is writing, and leveldb's own lock is
 * taken only by its open), then cuts every log where leveldb's writes to it
 * ended (ldb_logs_trim). A folder that does not exist yet is fine (nothing
 * to cut; the lock is taken by ldb_logs_watch). Returns 0, SX_EEXIST when
 * another open holds the lock (logged: the database is in use), or SX_EIO
 * (logged). *w is initialised either way. */
int ldb_logs_open(ldb_logs *w, const char *dir);

/* After leveldb opened dir: the lock if not held yet, and a watch for new
 * logs, each preallocated to `bytes` (leveldb's memtable size: a log holds
 * one memtable's writes); the newest log already there (the one leveldb
 * opened) is preallocated now. One inotify instance serves the process.
 * The environment variable SHARDEX_LOG_PREALLOC_MB overrides `bytes` (0
 * turns preallocation off; for measurements). Never fails: without
 * inotify or fallocate the logs grow as written (logged once). */
void ldb_logs_watch(ldb_logs *w, const char *dir, size_t bytes);

/* Preallocates the logs created since the last call, in any watched
 * folder (non-blocking: one read of the process's inotify descriptor).
 * Called after each write; safe from any thread. */
void ldb_logs_poll(void);

/* After leveldb closed dir: stops the watch, cuts the logs' preallocated
 * tails (a clean stop leaves none) and releases the lock. w may be merely
 * initialised. */
void ldb_logs_close(ldb_logs *w, const char *dir);

/* Cuts every log (*.log) in folder dir where leveldb's last write to it
 * ended (ldb_log_end), dropping the preallocated zeros after it — and a
 * record the writer was stopped in the middle of, which leveldb drops too
 * when the file ends inside it (logged). A log whose end cannot be told is
 * left as it is, for leveldb's open to judge. A folder that does not exist
 * is fine. Returns 0 or SX_EIO (logged: a log that cannot be read or cut).
 * Callers hold the folder's lock (ldb_logs_open). */
int ldb_logs_trim(const char *dir);

/* Where leveldb's writes to log file path ended, into *end: after the last
 * record before the file's final run of zeros when its checksum holds,
 * before it when it does not and the zeros begin inside it (a record cut
 * short), 0 for a file of zeros. Returns 0, SX_EIO (logged), or SX_EINVAL
 * when it cannot be told (zeros between records, a header running past
 * its block, a file ending inside a record, a bad checksum in a record the
 * zeros do not reach). */
int ldb_log_end(const char *path, off_t *end);

#endif
