/*
 * storage_part.h — one fact partition of a storage node: its keyspace in
 * the node's shared leveldb (storage_store.h), the group-commit write path
 * (facts + outbox records + metadata in one synced batch), its published
 * head/hw/item count, and the state its shipper and backfill share.
 *
 * Partition-local keys (stored behind the partition's 8-byte id prefix; the
 * st_k* functions below add and strip it):
 *   'F' | table_id (4 BE) | h (8 BE) | pk        -> [version, item]
 *   'O' | dest index part (8 BE) | seq (8 BE)    -> a chunk of the destination's
 *                                                  records, seq its last one's
 *                                                  (outbox.h)
 *   'M' 'm'                                      -> hw (8) | head (8) | items (8)
 *   'M' 'B' | index_id (4 BE)                    -> backfill's last seq (8 BE)
 *
 * Locking: `wlock` is the partition's write lock, held by the node's
 * committer (storage_write.c) while it builds and syncs a group, and by a
 * backfill; it guards `cat` and the working counters (w_hw, w_head,
 * w_items). `mu` guards the write queue, the published counters, the
 * backfill table and the shipper's per-destination acks.
 * Order: wlock before mu; the committer takes the wlocks of a group's
 * partitions in the node's partition order.
 */
#ifndef SX_STORAGE_PART_H
#define SX_STORAGE_PART_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <nng/nng.h>
#include "catalog.h"
#include "storage_cat.h"
#include "config.h"
#include "keyfilter.h"
#include "ldb.h"
#include "log.h"
#include "msg.h"
#include "outbox.h"
#include "storage_store.h"
#include "tuple.h"

#define ST_FACT_PREFIX 'F'
#define ST_OUT_PREFIX 'O'
#define ST_META_PREFIX 'M'
#define ST_FACT_HDR 5 /* 'F' + table id */
#define ST_FACT_KEY_MAX (ST_FACT_HDR + 8 + SX_MAX_KEY)

struct ship;
struct st_wreq;
struct pgroup;
struct repl;

/* A backfill this partition did: index id and the seq of its last record. */
typedef struct st_bf {
    uint32_t index_id;
    uint64_t last_seq;
} st_bf;

/* An index build's progress, published for NODE_STATUS (guarded by mu). */
typedef struct st_build {
    bool active;
    char indexes[128]; /* "table.index,..." being built */
    uint64_t scanned;  /* items of the snapshot read so far */
    uint64_t emitted;  /* records the index partitions applied so far */
    uint64_t runs;     /* sorted runs begun */
} st_build;

typedef struct st_part {
    uint64_t id, hlo, hhi;
    const cfg_cluster *cfg;
    st_cat *cc;
    st_store *store; /* the node's leveldb and committer */
    uint8_t pfx[8];  /* id, big-endian: every key's prefix */

    pthread_mutex_t wlock;
    const cat_catalog *cat; /* catalog writes use (borrowed from cc) */
    uint64_t w_hw, w_head, w_items;
    ob_chunk *chunks;        /* by destination (cfg->index order):
                              * the outbox records of the batch
                              * being built; empty outside wlock */
    struct u64set *bf_touch; /* non-NULL while a backfill scans a
                              * snapshot (backfill.h): every write
                              * adds st_fact_tag of its fact key */

    pthread_mutex_t mu;
    struct st_wreq *qhead, *qtail; /* writes waiting for the committer */
    bool stopping;                 /* new writes are refused */
    uint64_t hw, head, items;      /* durable, published */
    uint64_t outbox;               /* outbox records not yet acked */
    leveldb_writebatch_t *shipped; /* deletions of acked outbox records not
                                    * written yet (NULL: none): the next
                                    * st_commit carries them, or the
                                    * shipper once the partition has
                                    * been idle a while */
    uint32_t nshipped;             /* deletions in `shipped` */
    uint32_t nbf;
    st_bf *bf;
    st_build build;          /* the index build under way, for status */
    struct ship *ship;       /* the node's shipper (set before the
                              * node serves writes), or NULL */
    uint64_t range_slice_us; /* an S_RANGE page's time slice
                              * (SHARDEX_SCAN_SLICE_MS) */
    struct pgroup *pg;       /* its Raft group (storage_repl.c), or NULL:
                              * a partition of one replica */
} st_part;

/* Opens the partition's keyspace in store and loads its metadata,
 * backfill table and outbox count. cc and store are borrowed and must
 * outlive it. Returns 0, SX_EIO, SX_ENOMEM; *out freed by st_part_close. */
int st_part_open(const cfg_cluster *cfg, const cfg_part *cp, st_cat *cc, st_store *store,
                 st_part **out);

/* Closes the partition (the shipper and the store's committer must be
 * stopped first); accepts NULL. */
void st_part_close(st_part *p);

/* The partition's keyspace in the shared leveldb. Keys given and returned
 * are partition-local (at most ST_KEY_MAX bytes); snap may be NULL.
 * st_kget: as ldb_get (0, SX_ENOTFOUND, SX_EIO, SX_ENOMEM; *val malloc'd).
 * st_kscan: as ldb_scan over [lo, hi) of the partition (hi_n 0: to the end
 * of the partition's keys); the visitor sees local keys.
 * st_ksweep: as st_kscan, ascending, without filling the block cache
 * (ldb_scan_nocache): for a sweep over the whole partition, a backfill's.
 * st_kput / st_kdel: add a put / delete to batch b (SX_EINVAL for a key
 * longer than ST_KEY_MAX, else 0). */
#define ST_KEY_MAX (ST_FACT_KEY_MAX + 1)
int st_kget(st_part *p, const leveldb_snapshot_t *snap, const void *k, size_t kn, uint8_t **val,
            size_t *vn);
int st_kscan(st_part *p, const leveldb_snapshot_t *snap, const void *lo, size_t lo_n,
             const void *hi, size_t hi_n, bool desc, ldb_visit fn, void *arg);
int st_ksweep(st_part *p, const leveldb_snapshot_t *snap, const void *lo, size_t lo_n,
              const void *hi, size_t hi_n, ldb_visit fn, void *arg);
int st_kput(st_part *p, leveldb_writebatch_t *b, const void *k, size_t kn, const void *v,
            size_t vn);
int st_kdel(st_part *p, leveldb_writebatch_t *b, const void *k, size_t kn);

/* The store's absent-key filter (storage_filter.c) for a fact key of p,
 * hashed by kf_key_of(p->id, key): st_fact_absent is true only when the
 * store certainly holds no such key (then the committer need not read it);
 * st_fact_written tells the filter of a fact key a batch writes. Committer
 * only, or any thread: both are thread-safe. */
bool st_fact_absent(st_part *p, kf_key fk);
void st_fact_written(st_part *p, kf_key fk);

/* Serves S_WRITE: validates the request, queues it for group commit and
 * waits for the synced batch; appends the reply frame to out. Called
 * concurrently by server workers. */
void st_write(st_part *p, const msg_S_WRITE_req *rq, mp_buf *out);

/* Called once with the encoded S_WRITE reply (an error reply included);
 * reply's bytes may be taken. */
typedef void (*st_write_cb)(void *arg, mp_buf *reply);

/* Serves S_WRITE without blocking: validates rq (which must stay valid
 * until cb runs) and queues it; the committer calls cb once the synced
 * batch holds it (cb may also run before this returns, e.g. for an
 * invalid request). Returns false, having done nothing, when the request
 * needs a blocking step first (its catalog version or table is not cached
 * yet) or memory runs out: the caller then uses st_write. */
bool st_write_start(st_part *p, const msg_S_WRITE_req *rq, st_write_cb cb, void *arg);

/* Serves S_GET and S_RANGE (storage_read.c). Thread-safe, lock-free.
 * An S_RANGE page also stops once it has run for the partition's
 * range_slice_us (checked every ST_RANGE_SLICE_ITEMS items examined, so at
 * least that many are examined), with `next` set as for the other limits:
 * a worker is held for a bounded time whatever the filter skips, so calls
 * queued behind a crowd of scans still meet their callers' timeouts.
 * SHARDEX_SCAN_SLICE_MS sets it (0..ST_RANGE_SLICE_MAX_MS; 0 stops every
 * page at the first check, for tests). */
#define ST_RANGE_SLICE_MS 50
#define ST_RANGE_SLICE_MAX_MS 10000
#define ST_RANGE_SLICE_ITEMS 16
void st_get(st_part *p, const msg_S_GET_req *rq, mp_buf *out);
void st_range(st_part *p, const msg_S_RANGE_req *rq, mp_buf *out);

/* Reads the published head, hw, item count and outbox size under mu. */
void st_part_stats(st_part *p, uint64_t *head, uint64_t *hw, uint64_t *items, uint64_t *outbox);

/* Reads the index build under way (b->active false: none) under mu. */
void st_part_build(st_part *p, st_build *b);

/* The table tid in the newest cached catalog (refreshing once if unknown),
 * or NULL. The pointer is valid for the catalog cache's life. */
const cat_table *st_table(st_part *p, uint64_t tid);

/* Builds the fact key 'F' | tid | local (h|pk) into k (ST_FACT_KEY_MAX
 * bytes); returns its length. */
size_t st_fact_key(uint8_t *k, uint32_t tid, const uint8_t *local, size_t n);

/* A stored fact's value is the msgpack array [version, item]: the one
 * encoder and the one decoder of that form. st_fact_encode appends it to
 * out (check out->oom). st_fact_decode reads v: the version into *ver and
 * the item's bytes (borrowed from v) into *item; bytes after the item are
 * ignored. Returns 0, or SX_EIO when v is not that form. */
void st_fact_encode(mp_buf *out, uint64_t ver, const uint8_t *item, size_t n);
int st_fact_decode(const uint8_t *v, size_t vn, uint64_t *ver, mp_span *item);

/* Under wlock: switches the write catalog to cat if it is newer. */
void st_part_use_catalog(st_part *p, const cat_catalog *cat);

/* Under wlock: adds to the batch b being built an outbox record for index
 * entry key (index-local) of kind OUT_PUT/OUT_DEL with version v, hash h,
 * projection proj (raw msgpack; NULL for nil); advances w_head and counts
 * it in *pending. The record joins its destination's chunk (outbox.h),
 * which st_commit_prepare writes into b (or this, once the chunk is full);
 * the batch must end in st_commit/st_commit_prepare or, after any error
 * (this one's included: a chunk may then hold part of a record),
 * st_commit_abort, before wlock is released. Returns 0 or SX_ENOMEM. */
int st_outbox_append(st_part *p, leveldb_writebatch_t *b, int kind, uint64_t v, const uint8_t *key,
                     size_t kn, uint64_t h, const uint8_t *proj, size_t pn, uint64_t *pending);

/* Under wlock: appends the working metadata and the pending deletions of
 * shipped records (st_shipped_add) to b, writes it synced and, on success,
 * publishes the counters (adding `pending` outbox records) and wakes the
 * shipper. On failure restores the working counters and keeps the
 * deletions pending. Returns 0 or SX_EIO. */
int st_commit(st_part *p, leveldb_writebatch_t *b, uint64_t pending);

/* st_commit in two steps, for a group that syncs several partitions' batches
 * as one: st_commit_prepare (under wlock) appends the outbox chunks being
 * built, the metadata and pending deletions to b, counts `pending` outbox
 * records and fills *c; after the synced write, st_commit_done (still under
 * wlock) publishes (rc 0) or rolls back (rc != 0) exactly as st_commit does. */
typedef struct st_commit_st {
    leveldb_writebatch_t *dels;
    uint32_t ndels;
    uint64_t pending;
} st_commit_st;
void st_commit_prepare(st_part *p, leveldb_writebatch_t *b, uint64_t pending, st_commit_st *c);
void st_commit_done(st_part *p, int rc, st_commit_st *c);

/* Records the deletion of the n outbox records seqs of destination dest,
 * which its index partition acknowledged: the next st_commit writes it
 * with its group (a shipper then never waits in leveldb's writer queue
 * behind a synced group), or st_shipped_flush does. Past ST_SHIPPED_MAX
 * pending deletions (no group is coming) it writes them itself, unsynced;
 * out of memory, they are lost. A lost deletion only causes a redelivery
 * the index ignores. Thread-safe. */
#define ST_SHIPPED_MAX 65536
void st_shipped_add(st_part *p, uint64_t dest, const uint64_t *seqs, uint32_t n);

/* Writes the pending deletions of shipped records, unsynced (the shipper,
 * for a partition idle a while, or a closing partition). Thread-safe. */
void st_shipped_flush(st_part *p);

/* Takes wlock: when the partition's version high-water is at least idle_us
 * older than the clock, raises it to the clock and writes it synced (the
 * metadata alone), so that every later version is above it. A shipper
 * calls it for a partition idle a while, before the heartbeat that reports
 * the high-water: index partitions collect a tombstone only once every
 * source's high-water is past its version, and an idle partition's would
 * never move. Returns 0, SX_ENOMEM or SX_EIO (nothing changed then). */
int st_hw_advance(st_part *p, uint64_t idle_us);

/* Under wlock: drops the working counters' uncommitted changes and the
 * outbox records not yet written into a batch (a batch that will not be
 * written). */
void st_commit_abort(st_part *p);

/* The tag of partition-local fact key k in bf_touch (a hash: two keys
 * may share one, which only costs the backfill a read). Pure. */
uint64_t st_fact_tag(const uint8_t *k, size_t kn);

/* Microseconds since the epoch. */
uint64_t st_now_us(void);

/* ---- replication (storage_repl.c; the reloads in storage_part.c) ---- */

/* Makes p (open, its store's committer started) a replica of its Raft
 * group cp (cp->nrep > 1) in r, its snapshots in DATA/p<ID>.raft. Its
 * state then changes only by the entries its replica applies; it serves
 * writes, reads and shipping only while it leads (pg_ready). Returns 0 or
 * as pg_open. */
int st_part_replicate(st_part *p, struct repl *r, const cfg_part *cp, const char *data_dir);

/* Makes batch b of p durable: synced into the store (one replica), or
 * proposed to its group and applied here (replicated; refused with
 * SX_ENOTLEADER, *hint the leader's config id or 0, unless this replica
 * leads). Returns 0 or an sx_err (pgroup.h's codes for a replicated
 * partition). Call under wlock for batches that carry the metadata. */
int st_part_durable(st_part *p, leveldb_writebatch_t *b, int *hint);

/* Before a read that must see every acknowledged write: 0 at once for a
 * partition of one replica; for a replicated one, once this replica has
 * confirmed it leads and applied everything committed before the call
 * (ReadIndex), else SX_ENOTLEADER (*hint) or another pgroup.h code.
 * Blocks for about a round trip to the other replicas. */
int st_part_read_barrier(st_part *p, int *hint);

/* Under wlock, for a replicated partition: sets the working counters to
 * the published ones (the state its replica applied), before a change is
 * computed. Nothing for a partition of one replica. */
void st_part_sync_working(st_part *p);

/* Reload the partition's in-memory state from its keys: the backfill
 * table (st_part_load_bf), the outbox count (st_part_count_outbox), or
 * everything, metadata included (st_part_reload: after its keys were
 * replaced). Each returns 0 or the read's sx_err. */
int st_part_load_bf(st_part *p);
int st_part_count_outbox(st_part *p);
int st_part_reload(st_part *p);

#endif
