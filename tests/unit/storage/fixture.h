/*
 * fixture.h — what the storage tests that write through a partition share
 * (storage_write_test, shipper_test): storage partition 1 of a generated
 * cluster config (tests/lib/testcfg.h: one storage partition, index
 * partition 101) in a store of its own in a scratch dir, its catalog read
 * from a local catalog partition that the test fills through catalog
 * requests; S_WRITEs to it, and a scan of its outbox.
 *
 * Set-up in two steps: stf_open (the config and the catalog partition),
 * then the test creates its tables and indexes (stf_create_t,
 * stf_create_index, stf_backfilled), then stf_start (the partition's
 * catalog, the store, the partition, the store's committer). stf_close
 * releases whatever was opened.
 *
 * The helpers CHECK into the test program's tally: a test using this file
 * defines CHECK_TALLY_SHARED and CHECK_TALLY_DEFINE before its includes.
 */
#ifndef SX_TEST_STORAGE_FIXTURE_H
#define SX_TEST_STORAGE_FIXTURE_H

#include <stdbool.h>
#include <stdint.h>
#include "catalog_part.h"
#include "config.h"
#include "ldb.h"
#include "msg.h"
#include "storage_cat.h"
#include "storage_part.h"
#include "storage_store.h"

#define CHECK_TALLY_SHARED /* the helpers CHECK too */
#include "check.h"

/* A storage partition and what it stands on; each NULL until opened. */
typedef struct stf {
    const char *dir; /* the scratch dir (borrowed) */
    cfg_cluster *cfg;
    catp *cp;        /* the catalog partition, in DIR/catalog */
    st_cat *cc;      /* the partition's catalog, read from cp */
    st_store *store; /* the store, in DIR/store */
    st_part *p;      /* storage partition 1 (the store's committer holds &p) */
} stf;

/* Zeroes f, writes a config of cluster `name` into dir (nodes on ipc://
 * sockets in dir when ipc, else on TCP ports nothing listens on) and loads
 * it, then makes dir/catalog and opens the catalog partition in it (both
 * CHECKed). Returns false, with nothing opened, when the config could not
 * be loaded (said on stderr). */
bool stf_open(stf *f, const char *dir, const char *name, bool ipc);

/* The rest of the set-up once the catalog is filled: the partition's
 * catalog, the store (dir/store), partition 1 in it, the store's committer
 * started; each step CHECKed and taken only when what the step before it
 * opens is there. f must stay where it is until stf_close (the committer
 * holds &f->p). */
void stf_start(stf *f);

/* Stops the store's committer (if started) and releases everything f
 * holds: partition, store, catalog, catalog partition, config. */
void stf_close(stf *f);

/* Sends one catalog request (type t: MSG_CAT_UPDATE or MSG_CAT_BACKFILLED,
 * req its request struct) to c; returns its error (said on stderr when not
 * 0) and the catalog version it answered in *version. */
int stf_cat_call(catp *c, msg_type t, const void *req, uint64_t *version);

/* Creates table t with primary key id; the catalog version in *version.
 * Returns the request's error. */
int stf_create_t(catp *c, uint64_t *version);

/* Creates index `name` of table t on attribute attr (building until
 * stf_backfilled); the catalog version in *version. Returns the request's
 * error. */
int stf_create_index(catp *c, const char *name, const char *attr, uint64_t *version);

/* Reports index index_id backfilled on partition 1 (ready once every
 * partition has); the catalog version in *version. Returns the request's
 * error. */
int stf_backfilled(catp *c, uint32_t index_id, uint64_t *version);

/* One S_WRITE to partition 1 (catalog version catver, table 1) of the n
 * (at most 8) items (dels NULL, or dels[i] != 0: a delete of item i's
 * key), which it frees. When vers is given, CHECKs that the reply answers
 * all n and copies its versions into vers and its found flags into found.
 * Returns the reply's error (said on stderr when not 0). */
int stf_write(st_part *p, uint64_t catver, mp_buf *items, const uint64_t *dels, uint32_t n,
              uint64_t *vers, uint64_t *found);

/* Visits the values of p's outbox for index partition dest in key order
 * (key: ST_OUT_PREFIX, be64 dest, be64 seq), from seq 0 up to, not
 * including, UINT64_MAX. Returns what st_kscan returned. */
int stf_outbox_scan(st_part *p, uint64_t dest, ldb_visit visit, void *arg);

#endif
