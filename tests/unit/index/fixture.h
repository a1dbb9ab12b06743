/*
 * fixture.h — what the index partition tests share (index_gc_test,
 * index_wm_test, index_read_test, index_apply_test): index partition
 * IXF_PART opened in a scratch dir under a generated cluster config
 * (tests/lib/testcfg.h) whose storage partitions are its sources, and
 * I_APPLY requests of a few records under index-local keys made from names.
 *
 * The helpers CHECK into the test program's tally: a test using this file
 * defines CHECK_TALLY_SHARED and CHECK_TALLY_DEFINE before its includes.
 */
#ifndef SX_TEST_INDEX_FIXTURE_H
#define SX_TEST_INDEX_FIXTURE_H

#include <stdbool.h>
#include <stdint.h>
#include "config.h"
#include "index_part.h"
#include "msg.h"
#include "tuple.h"

#define CHECK_TALLY_SHARED /* the helpers CHECK too */
#include "check.h"

#define IXF_PART 101 /* the partition: the config's only index partition */
#define IXF_MAXREC 4 /* records in one ixf_req at most */

/* Writes a config of cluster `name` into dir (dir/cluster.json) with
 * nsources storage partitions (1: partition 1 over every hash; 2:
 * partitions 1 and 2) and one index partition, IXF_PART, and opens that
 * partition in dir (CHECKed). Sets *cfg and *p: the caller closes p
 * (ix_part_close), then frees cfg (cfg_free). Returns false, with nothing
 * left open, when the config could not be loaded or the partition opened
 * (said on stderr). */
bool ixf_open(const char *dir, const char *name, int nsources, cfg_cluster **cfg, ix_part **p);

/* Sets b (reusing its buffer) to the index-local key of name: index id 7
 * and the tuple (name); a name starting with 'x' is in index 8 instead.
 * CHECKs that it could be encoded. */
void ixf_local_key(tup_bytes *b, const char *name);

/* One I_APPLY request to IXF_PART, with its records' storage. */
typedef struct ixf_req {
    msg_I_APPLY_req m;
    uint64_t seqs[IXF_MAXREC], kinds[IXF_MAXREC], versions[IXF_MAXREC], hashes[IXF_MAXREC];
    mp_span keys[IXF_MAXREC], projs[IXF_MAXREC];
    tup_bytes kb[IXF_MAXREC];
} ixf_req;

/* Makes r: n (at most IXF_MAXREC) records of source `source`, record i of
 * kind kinds[i] and version versions[i] under ixf_local_key(names[i]),
 * hash 42, a nil projection, sequence number seqs[i] (seqs NULL: none, as
 * an I_BUILD record has); upto, hw and after as given. Release with
 * ixf_req_free (ixf_apply does). */
void ixf_req_make(ixf_req *r, uint64_t source, uint32_t n, const uint64_t *seqs,
                  const uint64_t *kinds, const uint64_t *versions, const char *const *names,
                  uint64_t upto, uint64_t hw, uint64_t after);

/* Frees r's keys. */
void ixf_req_free(ixf_req *r);

/* Applies r to p (synchronously: answered once synced; build: as an
 * I_BUILD), says its error on stderr if it failed, and frees r. Returns
 * the error. */
int ixf_apply(ix_part *p, ixf_req *r, bool build);

/* The stored state of ixf_local_key(name) in p: 0 absent, 1 live, 2 a
 * tombstone; the entry's version into *version (unless NULL) when there is
 * one. CHECKs that a stored entry decodes and that a read that found none
 * answered SX_ENOTFOUND. */
int ixf_stored(ix_part *p, const char *name, uint64_t *version);

#endif
