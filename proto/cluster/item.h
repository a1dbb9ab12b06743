/*
 * item.h — operations on items in their msgpack form.
 *
 * An item is a msgpack map from attribute name (string) to value (null,
 * bool, int, double, string, binary; lists and maps as non-key values).
 * Items travel and rest as these bytes; these helpers find attributes,
 * derive keys, and build projections without unpacking whole items.
 */
#ifndef SX_ITEM_H
#define SX_ITEM_H

#include "mp.h"
#include "tuple.h"
#include "catalog.h"

#define SX_MAX_ITEM (400 * 1024) /* largest encoded item accepted */

/* An item's attributes read once, for deriving several index tuples and
 * projections from one item without walking its bytes for each: names and
 * raw value spans in the item's order, borrowed from the item's bytes. */
#define ITEM_VIEW_INLINE 16
typedef struct item_view {
    const uint8_t *p; /* the item */
    size_t n;
    uint32_t count;
    mp_span *attr;     /* 2 * count: name, value, name, value...;
                        * inl or heap (so a view is not copied) */
    mp_span *heap;     /* for items of more attributes */
    uint32_t heap_cap; /* attributes heap holds */
    mp_span inl[2 * ITEM_VIEW_INLINE];
} item_view;

/* Reads item p..n (a msgpack map with string keys, each value nested at
 * most MP_MAX_DEPTH deep, the map using all n bytes) into v, whose memory
 * it borrows until the next parse or item_view_free. v must be zeroed
 * before its first use. Returns 0, SX_EPROTO, SX_ETOOBIG (over 4,096
 * attributes) or SX_ENOMEM. Lighter than item_validate, which every stored
 * item passed: names are not checked for repeats, and values may nest one
 * level deeper (item_validate counts the map itself as a level). */
int item_view_parse(item_view *v, const uint8_t *p, size_t n);

/* Frees what item_view_parse allocated (v may then be parsed again). */
void item_view_free(item_view *v);

/* Validates that p..n is one msgpack map with string keys, unique names
 * and depth-limited values. Returns 0 or SX_EPROTO / SX_ETOOBIG. */
int item_validate(const uint8_t *p, size_t n);

/* Finds attribute name in the item map; on success *val is the raw span of
 * its value. Returns 0, SX_ENOTFOUND, or SX_EPROTO. */
int item_get(const uint8_t *p, size_t n, const char *name, mp_span *val);

/* Builds the primary key tuple of an item (or of a key-only map) for table t:
 * encoded partition key value, then the sort key value if the table has one.
 * *pk_len is set to the length of the partition-key component alone.
 * Returns 0, SX_EKEY (missing or non-scalar key attribute, or key too long),
 * SX_EPROTO, SX_ENOMEM. */
int item_primary_key(const cat_table *t, const uint8_t *p, size_t n, tup_bytes *pk, size_t *pk_len);

/* Builds the index tuple (indexed values then primary key tuple) of an item
 * for index ix into key (appended after whatever key holds). Returns 0,
 * SX_ENOTFOUND when the item lacks an indexed attribute or it is not a
 * scalar (the item is then not in the index: sparse), SX_EKEY (too long),
 * SX_EPROTO, SX_ENOMEM. */
int item_index_tuple(const cat_table *t, const cat_index *ix, const uint8_t *p, size_t n,
                     tup_bytes *key);

/* item_index_tuple on an item already read (item_view_parse). */
int item_index_tuple_view(const cat_table *t, const cat_index *ix, const item_view *v,
                          tup_bytes *key);

/* Appends to out the projection of an item for index ix: the whole item for
 * CAT_PROJ_ALL; otherwise a map of the key attributes, the indexed
 * attributes and (CAT_PROJ_LIST) the listed ones that the item has.
 * Returns 0, SX_EPROTO, SX_ENOMEM. */
int item_project(const cat_table *t, const cat_index *ix, const uint8_t *p, size_t n, mp_buf *out);

/* item_project on an item already read (item_view_parse). */
int item_project_view(const cat_table *t, const cat_index *ix, const item_view *v, mp_buf *out);

/* Appends to out a map holding only the named attributes the item has
 * (always including the table's key attributes). Returns 0 or an error. */
int item_select(const cat_table *t, const uint8_t *p, size_t n, char *const *names, uint32_t nnames,
                mp_buf *out);

/* True when every attribute named in the projection of ix (plus keys and
 * indexed attributes) covers all of names (nnames == 0 means "the whole
 * item": only CAT_PROJ_ALL covers it). */
bool item_covers(const cat_table *t, const cat_index *ix, char *const *names, uint32_t nnames);

/* Equality filter: where is a msgpack map attr -> scalar value. Returns
 * 1 when every attribute of where is present in the item with an equal
 * value (compared by tuple encoding), 0 when not, negative sx_err when
 * where or the item is malformed. */
int item_matches(const uint8_t *item, size_t n, const uint8_t *where, size_t wn);

#endif
