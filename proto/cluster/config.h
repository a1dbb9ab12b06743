/*
 * config.h — the cluster map: who serves what, read from the cluster's JSON
 * config file (documented in deploy/README.md, example in
 * deploy/cluster.example.json).
 *
 * Storage partitions own inclusive ranges [lo, hi] of the 64-bit shard hash;
 * together they cover it exactly. Index partitions own half-open ranges
 * [lo, hi) of the index tuple space (indexed values then primary key, the
 * part of an index key after its 4-byte index id), shared by every index;
 * together they cover it exactly (first lo and last hi unbounded).
 */
#ifndef SX_CONFIG_H
#define SX_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include "hash.h"

#define SX_ROLE_ROUTER 0
#define SX_ROLE_STORAGE 1
#define SX_ROLE_INDEX 2

/* Most replicas of one partition or of the catalog. */
#define CFG_MAX_REPLICAS 7
/* The catalog's Raft group id (partition ids are below it). */
#define CFG_CATALOG_GROUP UINT64_MAX

typedef struct cfg_part {
    uint64_t id;               /* unique across the cluster, never 0 */
    int node;                  /* index into cfg.nodes: the node it is listed under, its
                                * first replica (rep[0]) */
    int nrep;                  /* replicas: 1 (no replication) .. CFG_MAX_REPLICAS */
    int rep[CFG_MAX_REPLICAS]; /* their nodes, rep[0] == node */
    /* storage: hash range, inclusive */
    uint64_t hlo, hhi;
    /* index: tuple range [lo, hi); lo_n == 0 means unbounded below,
     * hi_n == 0 unbounded above */
    uint8_t *lo, *hi;
    size_t lo_n, hi_n;
} cfg_part;

typedef struct cfg_node {
    char *name;
    int id;    /* "id": the node's number in Raft replica ids, 1..255;
                * 0 when not given (then the node holds no replica of a
                * replicated group) */
    int role;  /* SX_ROLE_* */
    char *url; /* nng URL it listens on */
    int host;  /* a router run inside a storage node's process
                * ("host": that node's name): the node's index
                * into cfg.nodes; -1: a process of its own
                * (shardex-router), and for every other node */
} cfg_node;

#define CFG_SKEW_DEFAULT_MS 100
#define CFG_SKEW_MAX_MS 60000

typedef struct cfg_cluster {
    char *cluster;
    uint8_t hash_key[SX_HASH_KEY_BYTES];
    uint8_t token_key[32];
    bool has_link_key;                 /* "link_key" given: links are authenticated with it */
    uint8_t link_key[32];              /* (proto/runtime/link_auth.h); required beyond loopback */
    int max_clock_skew_ms;             /* the most two hosts' clocks may differ: a write
                                        * is applied only this long before its deadline
                                        * (msg.h, deadline_ms) */
    char *tls_ca, *tls_cert, *tls_key; /* "client_tls": the routers' client port
                                        * speaks TLS with these PEM files (paths
                                        * resolved against the config file's
                                        * folder); NULL without it */
    int catalog_node;                  /* index into nodes of the storage node holding the catalog
                                        * (its first replica: catalog[0]) */
    int ncatalog;                      /* the catalog's replicas: 1 .. CFG_MAX_REPLICAS */
    int catalog[CFG_MAX_REPLICAS];
    int nnodes;
    cfg_node *nodes;
    int nstorage; /* storage partitions, sorted by hlo */
    cfg_part *storage;
    int nindex; /* index partitions, sorted by lo */
    cfg_part *index;
} cfg_cluster;

/* Loads and validates the config file at path. On success *out is owned by
 * the caller (cfg_free). On failure returns SX_ECONFIG (or SX_ENOMEM) and,
 * if err is not NULL, writes a one-line reason into err[errlen]. */
int cfg_load(const char *path, cfg_cluster **out, char *err, size_t errlen);

/* True when url (an nng URL, parsed as nng does) can only be reached from
 * this host: ipc://, or tcp:// (tcp4, tcp6, tls+tcp ...) on a loopback
 * address or localhost. An empty host (every interface), any other name,
 * a "user@" part or a URL nng cannot parse is not. */
bool cfg_url_is_local(const char *url);

/* What this version of the daemons cannot serve of a valid config: the
 * one place for such a refusal (this version serves every valid config:
 * the catalog, fact and index partitions replicated or not). Returns 0, or
 * SX_ECONFIG with a one-line reason in err[errlen] (may be NULL).  The
 * daemons refuse to start with such a config rather than serve one
 * replica of it silently. */
int cfg_check_supported(const cfg_cluster *cfg, char *err, size_t errlen);
/* Frees a config; accepts NULL. */
void cfg_free(cfg_cluster *cfg);

/* Node lookup by name; returns its index or -1. */
int cfg_node_by_name(const cfg_cluster *cfg, const char *name);
/* Node lookup by its "id" (1..255); returns its index or -1. */
int cfg_node_by_id(const cfg_cluster *cfg, int id);
/* True when node (an index into cfg.nodes) holds a replica of p. */
bool cfg_part_on(const cfg_part *p, int node);
/* True when node holds a replica of the catalog. */
bool cfg_catalog_on(const cfg_cluster *cfg, int node);

/* The storage partition owning hash h (always exists in a valid config). */
const cfg_part *cfg_storage_for(const cfg_cluster *cfg, uint64_t h);

/* The index partition owning index tuple t..n (always exists). */
const cfg_part *cfg_index_for(const cfg_cluster *cfg, const uint8_t *t, size_t n);

/* Partition lookup by id, either kind; NULL when unknown. */
const cfg_part *cfg_part_by_id(const cfg_cluster *cfg, uint64_t id, int *role);

/* Index partitions overlapping the tuple range [lo, hi) (hi_n == 0:
 * unbounded), as a contiguous run: *first and *count. */
void cfg_index_range(const cfg_cluster *cfg, const uint8_t *lo, size_t lo_n, const uint8_t *hi,
                     size_t hi_n, int *first, int *count);

#endif
