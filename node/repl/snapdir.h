/*
 * snapdir.h — the snapshot files of one replicated key range of a leveldb
 * (a fact partition's prefix in its storage node's store, the catalog's
 * whole leveldb): the state machine side of Raft snapshots, shared by every
 * kind of group so that each makes, serves, stages, verifies and installs
 * snapshots the same way.
 *
 * Files in the folder DIR (one per group):
 *   snap-1        the empty state: the bootstrap snapshot every replica of
 *                 a group starts from (Raft index 1), made when the folder
 *                 is new and the range empty
 *   snap-<N>      a snapshot of the range at applied index N (ldb_snap.h's
 *                 format), made for compaction or received and installed;
 *                 the newest and the one before it are kept (the newest's
 *                 meta is persisted by the round after the one that made
 *                 it, so until then the previous one may be the durable
 *                 meta's)
 *   stage         a snapshot being received from the leader
 *
 * Install and crashes: a received snapshot is renamed snap-<N> (durably)
 * before it is installed, so a crash at any later point finds it there;
 * the install writes a marker key first and removes it, with the applied
 * index, in its last synced batch (ldb_snap_install). A marker found at
 * open means an install stopped midway: the range is emptied (the empty
 * state), and the host installs the snapshot again from snap-<N>.
 *
 * The applied index is stored under the caller's applied key, 8 bytes
 * big-endian, inside the range or not.
 *
 * Threading: one group's functions run on its Raft loop thread (open and
 * close on the node's main thread, before and after).
 */
#ifndef SX_SNAPDIR_H
#define SX_SNAPDIR_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ldb.h"
#include "raft.h"

#define SNAPDIR_KEY_MAX 64

typedef struct snapdir {
    char dir[3072];
    char what[64]; /* "partition 3", "the catalog": for log lines */
    ldb *db;
    uint8_t lo[SNAPDIR_KEY_MAX], hi[SNAPDIR_KEY_MAX];
    size_t lo_n, hi_n; /* hi_n 0: to the end of the key space */
    uint8_t marker[SNAPDIR_KEY_MAX], akey[SNAPDIR_KEY_MAX];
    size_t marker_n, akey_n;
    uint64_t newest; /* newest snap-<N> present (1: only the empty one) */

    /* snapdir_make_bg's job (mu guards busy, done, job_rc, job_size) */
    pthread_mutex_t mu;
    pthread_t th;
    bool busy, done;
    const leveldb_snapshot_t *job_snap;
    uint64_t job_index, job_size;
    int job_rc;
} snapdir;

/* Sets s up for range [lo, hi) of db (lo_n 0: from the start; hi_n 0: to
 * the end) with the install marker and applied keys given (each at most
 * SNAPDIR_KEY_MAX bytes), and folder dir (created 0700 if missing). When
 * the marker is present (an install stopped midway) the range is emptied
 * (synced) and *wiped set: the caller reloads its state. When snap-1 is
 * missing, the range must hold nothing (else SX_EIO: the data was not made
 * by a replica of this group, and is never silently replaced) and snap-1
 * is made of it. *boot_size is snap-1's size, *applied the applied index
 * stored under the applied key (0 when absent). Returns 0, SX_EINVAL,
 * SX_EIO (the reason logged) or SX_ENOMEM. */
int snapdir_open(snapdir *s, const char *dir, const char *what, ldb *db, const void *lo,
                 size_t lo_n, const void *hi, size_t hi_n, const void *marker, size_t marker_n,
                 const void *akey, size_t akey_n, bool *wiped, uint64_t *boot_size,
                 uint64_t *applied);

/* The applied index stored in db under s's applied key (0 when absent)
 * into *applied. Returns 0 or SX_EIO (a value that is not 8 bytes, a read
 * error). */
int snapdir_applied(const snapdir *s, uint64_t *applied);

/* Adds applied index to batch b under s's applied key. */
void snapdir_put_applied(const snapdir *s, leveldb_writebatch_t *b, uint64_t applied);

/* rhost_sm_ops' snapshot functions over s (host.h): snap_make of the
 * range as it is now, at applied index `applied` (the caller makes sure
 * nothing else writes the range meanwhile); snap_read of snap-<index>;
 * snap_stage of a received chunk; snap_verify of the staged file against
 * meta; snap_install of meta's snapshot (staged or already renamed). Each
 * returns 0 or -1, the reason logged. */
int snapdir_make(snapdir *s, uint64_t applied, uint64_t *index, uint64_t *size);

/* snap_make for a range too large to scan on the loop thread: the first
 * call takes a leveldb snapshot of the range as it is now (at applied
 * index `applied`), starts a thread that writes it to snap-<applied>, and
 * returns -1 (no snapshot yet: the host asks again later); so do the calls
 * while it runs. The first call after it finished returns it (0, *index
 * its applied index, below the current one by what was applied meanwhile,
 * which the host accepts), or -1 if it failed (logged; the next call
 * starts another). */
int snapdir_make_bg(snapdir *s, uint64_t applied, uint64_t *index, uint64_t *size);

/* Waits for snapdir_make_bg's job, if one runs, and frees what it holds;
 * s may be opened again. Accepts a zeroed or unopened s. */
void snapdir_close(snapdir *s);
int snapdir_read(snapdir *s, uint64_t index, uint64_t off, uint8_t *buf, uint32_t len);
int snapdir_stage(snapdir *s, uint64_t off, const uint8_t *p, uint32_t len);
int snapdir_verify(snapdir *s, const raft_snap_meta *m);
int snapdir_install(snapdir *s, const raft_snap_meta *m);

/* Deletes every key of the range (synced): the empty state, applied 0.
 * Returns 0, SX_ENOMEM or SX_EIO. */
int snapdir_wipe(snapdir *s);

#endif
