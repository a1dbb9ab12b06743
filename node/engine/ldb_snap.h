/*
 * ldb_snap.h — snapshots of a leveldb key range as files, for Raft: make
 * one at a consistent point, serve byte ranges of it (the chunks streamed
 * to a follower), receive chunks into a staging file, verify a received
 * file, and install it (replace the range's contents with the file's).
 *
 * A partition's state is a key range [lo, hi) of a leveldb (hi empty: to
 * the end of the key space): a fact partition is its 8-byte prefix's range
 * in the storage node's leveldb, an index partition or the catalog the
 * whole key space of a leveldb of its own. Keys are stored as they are in
 * the leveldb, so a snapshot installs into the same key space.
 *
 * The file format (version 1; integers big-endian):
 *
 *   header   magic "SXLDBSNP" (8 bytes), version u32,
 *            lo_n u32, lo, hi_n u32, hi,         the range [lo, hi)
 *            applied u64,                        the caller's applied index
 *            meta_n u32, meta                    opaque caller bytes (e.g.
 *                                                the Raft term)
 *   records  kn u32, vn u32, key, value          in ascending key order,
 *                                                every key in [lo, hi)
 *   trailer  count u64, total u64, sum[32]       the record count, the
 *                                                file's size (trailer
 *                                                included) and the
 *                                                BLAKE2b-256 (libsodium
 *                                                crypto_generichash,
 *                                                unkeyed) of every byte
 *                                                before sum
 *
 * The trailer is the file's last LDB_SNAP_TRAILER bytes, so the records are
 * exactly the bytes between the header and it. A file that came over the
 * network is checked by ldb_snap_verify before anything trusts it, and
 * parsed again with the same checks while it is installed.
 *
 * Install and crashes: ldb_snap_install first writes the caller's marker
 * key (synced), then deletes the range and writes the records (lazily, in
 * batches written once they pass LDB_SNAP_BATCH bytes), syncs every log, and
 * deletes the marker in a last synced batch that also carries what the
 * caller adds (e.g. its applied-index key), so the state and its applied
 * index become durable together. A process or machine that dies in
 * between leaves the marker: at the next start the caller finds it
 * (ldb_snap_marker_present) and must treat the range as garbage — reset it
 * and fetch a new snapshot.
 *
 * Errors: every function returns 0 or an sx_err — SX_EINVAL (bad
 * arguments; for ldb_snap_stage_write, a chunk that does not continue the
 * staged bytes), SX_ENOTFOUND (no such file), SX_EPROTO (a file that is
 * not a well-formed snapshot, or fails its checksum), SX_EVERSION (a
 * format version this code does not read), SX_ENOMEM, SX_EIO (a file or
 * leveldb I/O error). Where a function takes err/errlen (err may be NULL),
 * it writes a one-line message there on failure, saying what and where.
 *
 * Threading: the functions keep no state between calls and may run on any
 * thread; the caller makes sure no one else writes the range while it is
 * being installed, and that a path is not written by two calls at once.
 */
#ifndef SX_LDB_SNAP_H
#define SX_LDB_SNAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <leveldb/c.h>
#include "ldb.h"

#define LDB_SNAP_VERSION 1u
#define LDB_SNAP_SUM_BYTES 32u                      /* BLAKE2b-256 */
#define LDB_SNAP_TRAILER (16u + LDB_SNAP_SUM_BYTES) /* count, total, sum */
#define LDB_SNAP_BOUND_MAX 1024u                    /* bytes of lo, of hi */
#define LDB_SNAP_META_MAX 4096u                     /* bytes of meta */
#define LDB_SNAP_KEY_MAX (1u << 20)                 /* bytes of a record's key */
#define LDB_SNAP_BATCH (4u << 20)                   /* install's write batches */

/* What a verified snapshot file holds (ldb_snap_verify). Plain values, no
 * pointers: nothing to free. */
typedef struct ldb_snap_info {
    uint8_t lo[LDB_SNAP_BOUND_MAX];
    size_t lo_n;
    uint8_t hi[LDB_SNAP_BOUND_MAX];
    size_t hi_n; /* 0: the range runs to the end of the key space */
    uint64_t applied;
    uint8_t meta[LDB_SNAP_META_MAX];
    size_t meta_n;
    uint64_t records; /* the number of records */
    uint64_t size;    /* the file's size in bytes */
    uint8_t sum[LDB_SNAP_SUM_BYTES];
} ldb_snap_info;

/* Makes a snapshot file of d's keys in [lo, hi) (hi_n == 0: to the end of
 * the key space; lo_n == 0: from the start) as of snap (NULL: the state
 * when the scan starts, itself consistent), with the caller's applied index
 * and meta bytes in its header. Reads past the block cache
 * (ldb_scan_nocache); writes path.tmp through a buffer, fsyncs it, renames
 * it to path (replacing any file there) and fsyncs the folder. lo_n and
 * hi_n are at most LDB_SNAP_BOUND_MAX, meta_n at most LDB_SNAP_META_MAX,
 * hi_n == 0 or lo <= hi. On success *size_out (may be NULL) is the file's
 * size. On failure path.tmp is removed and path is left as it was —
 * but for a failed fsync of the folder, after which path is complete and
 * only its name may not survive a machine crash.
 * Returns 0, SX_EINVAL (bounds, meta or a key too long), SX_ENOMEM or
 * SX_EIO, with a message in err. */
int ldb_snap_make(ldb *d, const leveldb_snapshot_t *snap, const void *lo, size_t lo_n,
                  const void *hi, size_t hi_n, uint64_t applied, const void *meta, size_t meta_n,
                  const char *path, uint64_t *size_out, char *err, size_t errlen);

/* Reads up to len bytes of the file at path from offset into buf (a chunk
 * to serve); *got is how many: fewer than len only at the file's end (0
 * when offset is the file's size). Returns 0, SX_ENOTFOUND (no file),
 * SX_EINVAL (offset past the end) or SX_EIO, with a message in err. */
int ldb_snap_read(const char *path, uint64_t offset, void *buf, size_t len, size_t *got, char *err,
                  size_t errlen);

/* The staging file's length in *len: how many bytes have been received (0
 * when there is no staging file). Returns 0 or SX_EIO. */
int ldb_snap_stage_size(const char *path, uint64_t *len, char *err, size_t errlen);

/* Receives a chunk: writes len bytes of data at offset of the staging file
 * at path. Offset 0 starts over (creates or truncates the file); any other
 * offset must be the staged length, else SX_EINVAL and nothing is written
 * (the caller asks the sender to restart from *staged). *staged (may be
 * NULL) is the staged length afterwards, in every case but SX_EIO. Not
 * synced: ldb_snap_stage_sync. Returns 0, SX_EINVAL or SX_EIO (a torn
 * chunk may then be staged: ldb_snap_stage_size says how much). */
int ldb_snap_stage_write(const char *path, uint64_t offset, const void *data, size_t len,
                         uint64_t *staged, char *err, size_t errlen);

/* Makes the staged bytes durable: fsyncs the staging file at path and its
 * folder. Returns 0, SX_ENOTFOUND (no staging file) or SX_EIO. */
int ldb_snap_stage_sync(const char *path, char *err, size_t errlen);

/* Checks the snapshot file at path: magic, version, header bounds, every
 * record within the file, keys ascending and within [lo, hi), the record
 * count, the size and the checksum. Reads the whole file (a buffer of
 * 1 MiB and one key at a time: memory does not grow with the file). On
 * success fills *info (may be NULL). Returns 0, SX_ENOTFOUND, SX_EPROTO,
 * SX_EVERSION, SX_ENOMEM or SX_EIO, with a message in err. Never crashes
 * on a file's contents. */
int ldb_snap_verify(const char *path, ldb_snap_info *info, char *err, size_t errlen);

/* Adds the caller's writes to install's last batch (the one that deletes
 * the marker and is synced): e.g. the applied index, info->applied. Returns
 * 0 or an sx_err, which stops the install before that batch (the marker
 * stays) and is returned by ldb_snap_install. */
typedef int (*ldb_snap_extra_fn)(void *arg, leveldb_writebatch_t *b, const ldb_snap_info *info);

/* Installs the snapshot file at path into d: verifies it (nothing is
 * written when it fails, nor when it holds a record with the marker's
 * key); writes marker (an empty value under key marker, inside the range
 * or not) synced; deletes every key of d in the file's [lo, hi) except the
 * marker, and writes the file's records, both lazily in batches written
 * once they pass LDB_SNAP_BATCH bytes; fsyncs every leveldb log
 * (ldb_sync_logs: lazy writes in a log leveldb switched away from are not
 * covered by a later synced write); then writes one synced batch that
 * deletes the marker and holds what extra (may be NULL) adds with arg.
 * On success *info (may be NULL) describes the file. On failure after the
 * marker was written it is still there, and the range is garbage until
 * the caller resets it (see the file's comment). Returns 0, the extra
 * function's error, SX_EINVAL (no marker, or the file holds its key), as
 * ldb_snap_verify, or SX_EIO (leveldb), with a message in err. */
int ldb_snap_install(ldb *d, const char *path, const void *marker, size_t marker_n,
                     ldb_snap_extra_fn extra, void *arg, ldb_snap_info *info, char *err,
                     size_t errlen);

/* Whether d holds key (an install's marker): *present. Returns 0 or
 * SX_EIO / SX_ENOMEM. */
int ldb_snap_marker_present(ldb *d, const void *key, size_t n, bool *present);

#endif
