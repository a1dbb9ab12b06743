/*
 * testcfg.h — the cluster config a unit test runs under, written into its
 * scratch dir and loaded: router "r1", storage node "s1" (holding the
 * catalog) and index node "i1", hash key 000102..0f, and
 *   - storage partition 1 over every shard hash, or partitions 1 and 2
 *     over its lower and upper half;
 *   - index partition 101 over every tuple, or partitions 101 (tuples
 *     below ["M"]) and 102 (from ["M"] on);
 *   - s1 and i1 on ipc://DIR/s1.sock and ipc://DIR/i1.sock (DIR the
 *     scratch dir), or on tcp://127.0.0.1:2 and :3, which nothing listens
 *     on (for tests that call a partition directly).
 */
#ifndef SX_TESTCFG_H
#define SX_TESTCFG_H

#include <stdbool.h>

struct cfg_cluster;

typedef struct testcfg {
    const char *cluster;    /* the cluster's name */
    int nstorage;           /* storage partitions: 1 or 2 */
    int nindex;             /* index partitions: 1 or 2 */
    bool ipc;               /* s1 and i1 on ipc:// sockets in the scratch dir */
    const char *router_url; /* r1's URL; NULL: tcp://127.0.0.1:1 */
    const char *token_key;  /* 64 hex digits; NULL: 000102..1f */
} testcfg;

/* Writes the config c describes, for scratch dir dir, to dir/cluster.json
 * and loads it (cfg_load). Returns the config (the caller frees it with
 * cfg_free), or NULL with what failed on stderr, prefixed by c->cluster. */
struct cfg_cluster *testcfg_load(const char *dir, const testcfg *c);

#endif
