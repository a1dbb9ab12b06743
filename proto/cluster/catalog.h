/*
 * catalog.h — tables and indexes: the in-memory catalog and its msgpack form.
 *
 * The catalog lives durably on the catalog partition (hosted by the storage
 * node the cluster config names) and is copied, whole and versioned, to every
 * router and node. Ids are assigned from one counter and never reused, so a
 * dropped index's entries can be recognised and collected.
 *
 * Wire form (a msgpack map), see proto/PROTOCOL.md "Catalog":
 *   {"version":u, "next_id":u, "tables":[
 *      {"id":u, "name":s, "pk":s, "sk":s|nil, "indexes":[
 *         {"id":u, "name":s, "attrs":[s...], "proj":"keys"|"all"|"list",
 *          "proj_attrs":[s...], "state":"building"|"ready",
 *          "done_parts":[u...]}]}]}
 */
#ifndef SX_CATALOG_H
#define SX_CATALOG_H

#include <stdint.h>
#include <stdbool.h>
#include "mp.h"

#define CAT_MAX_NAME 128 /* bytes in a table, index or attribute name */
#define CAT_MAX_ATTRS 16 /* attributes in an index key or projection */

typedef enum cat_proj { CAT_PROJ_KEYS = 0, CAT_PROJ_ALL = 1, CAT_PROJ_LIST = 2 } cat_proj;
typedef enum cat_state { CAT_BUILDING = 0, CAT_READY = 1 } cat_state;

typedef struct cat_index {
    uint32_t id;
    char *name;
    uint32_t nattrs;
    char **attrs;
    cat_proj proj;
    uint32_t nproj;
    char **proj_attrs;
    cat_state state;
    uint32_t ndone;
    uint64_t *done_parts; /* storage partitions whose backfill has shipped */
} cat_index;

typedef struct cat_table {
    uint32_t id;
    char *name;
    char *pk;
    char *sk; /* NULL when the table has no sort key */
    uint32_t nindexes;
    cat_index *indexes;
} cat_table;

typedef struct cat_catalog {
    uint64_t version;
    uint32_t next_id;
    uint32_t ntables;
    cat_table *tables;
} cat_catalog;

/* Decodes a catalog from its msgpack form. On success *out is owned by the
 * caller (free with cat_free). Returns 0, SX_EPROTO, or SX_ENOMEM. */
int cat_decode(const uint8_t *p, size_t n, cat_catalog **out);

/* Encodes the catalog into b (appends one map). Returns 0 or SX_ENOMEM. */
int cat_encode(const cat_catalog *cat, mp_buf *b);

/* Encodes one index descriptor (the map used inside the catalog). */
void cat_encode_index(const cat_index *ix, mp_buf *b);

/* Returns a new empty catalog (version 0, next_id 1) or NULL. */
cat_catalog *cat_new(void);

/* Deep copy; returns NULL on allocation failure. */
cat_catalog *cat_clone(const cat_catalog *cat);

/* Frees a catalog; accepts NULL. */
void cat_free(cat_catalog *cat);

/* Lookups; return borrowed pointers valid while the catalog lives, or NULL. */
cat_table *cat_table_by_name(const cat_catalog *cat, const char *name, size_t n);
cat_table *cat_table_by_id(const cat_catalog *cat, uint32_t id);
cat_index *cat_index_by_name(const cat_table *t, const char *name, size_t n);
cat_index *cat_index_by_id(const cat_catalog *cat, uint32_t id, cat_table **table);

/* Mutations used by the catalog partition; each bumps version on success.
 * cat_create_table: SX_EEXIST, SX_EINVAL (bad names), SX_ENOMEM.
 * cat_create_index: SX_ENOTABLE, SX_EEXIST, SX_EINVAL, SX_ENOMEM; the new
 *   index starts CAT_BUILDING with no done partitions.
 * cat_drop_index: SX_ENOTABLE, SX_ENOINDEX.
 * cat_mark_backfilled: records part as done for index id; when all of
 *   parts[0..nparts) are done the index becomes CAT_READY. SX_ENOINDEX. */
int cat_create_table(cat_catalog *cat, const char *name, const char *pk, const char *sk);
int cat_create_index(cat_catalog *cat, const char *table, const char *name,
                     const char *const *attrs, uint32_t nattrs, cat_proj proj,
                     const char *const *proj_attrs, uint32_t nproj);
int cat_drop_index(cat_catalog *cat, const char *table, const char *name);
int cat_mark_backfilled(cat_catalog *cat, uint32_t index_id, uint64_t part, const uint64_t *parts,
                        uint32_t nparts);

/* True when name is a valid table/index/attribute name: 1..CAT_MAX_NAME
 * bytes of [A-Za-z0-9_.-], not "primary". */
bool cat_name_ok(const char *name);

#endif
