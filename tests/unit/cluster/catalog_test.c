/*
 * catalog_test.c — unit test of proto/cluster/catalog.c: name validation, table and
 * index creation, backfill → ready transitions, drop, clone, msgpack round
 * trip, and rejection of truncated or garbage encodings.
 * Standalone: main() returns non-zero when any check fails.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "catalog.h"
#include "check.h"
#include "sx_errors.h"

/* Encodes cat into a malloc'd buffer; returns NULL on failure. */
static uint8_t *encode(const cat_catalog *cat, size_t *n)
{
    mp_buf b;
    uint8_t *p = NULL;

    mp_buf_init(&b);
    if (cat_encode(cat, &b) != 0 || mp_buf_take(&b, &p, n) != 0)
        p = NULL;
    mp_buf_free(&b);
    return p;
}

static bool str_eq(const char *a, const char *b)
{
    if (a == NULL || b == NULL)
        return a == b;
    return strcmp(a, b) == 0;
}

static bool strs_eq(char **a, char **b, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (!str_eq(a[i], b[i]))
            return false;
    return true;
}

static bool index_eq(const cat_index *a, const cat_index *b)
{
    return a->id == b->id && str_eq(a->name, b->name) && a->nattrs == b->nattrs &&
           strs_eq(a->attrs, b->attrs, a->nattrs) && a->proj == b->proj && a->nproj == b->nproj &&
           strs_eq(a->proj_attrs, b->proj_attrs, a->nproj) && a->state == b->state &&
           a->ndone == b->ndone &&
           (a->ndone == 0 ||
            memcmp(a->done_parts, b->done_parts, a->ndone * sizeof(uint64_t)) == 0);
}

/* Deep equality of two catalogs. */
static bool cat_eq(const cat_catalog *a, const cat_catalog *b)
{
    if (a->version != b->version || a->next_id != b->next_id || a->ntables != b->ntables)
        return false;
    for (uint32_t i = 0; i < a->ntables; i++) {
        const cat_table *ta = &a->tables[i], *tb = &b->tables[i];
        if (ta->id != tb->id || !str_eq(ta->name, tb->name) || !str_eq(ta->pk, tb->pk) ||
            !str_eq(ta->sk, tb->sk) || ta->nindexes != tb->nindexes)
            return false;
        for (uint32_t j = 0; j < ta->nindexes; j++)
            if (!index_eq(&ta->indexes[j], &tb->indexes[j]))
                return false;
    }
    return true;
}

static void test_names(void)
{
    char longest[CAT_MAX_NAME + 2];

    CHECK(cat_name_ok("users"));
    CHECK(cat_name_ok("a.b-c_D9"));
    CHECK(!cat_name_ok(""));
    CHECK(!cat_name_ok("has space"));
    CHECK(!cat_name_ok("semi;colon"));
    CHECK(!cat_name_ok("caf\xc3\xa9"));
    CHECK(!cat_name_ok("primary"));
    memset(longest, 'x', CAT_MAX_NAME);
    longest[CAT_MAX_NAME] = '\0';
    CHECK(cat_name_ok(longest));
    longest[CAT_MAX_NAME] = 'x';
    longest[CAT_MAX_NAME + 1] = '\0';
    CHECK(!cat_name_ok(longest));
}

static void test_tables(cat_catalog *cat)
{
    cat_table *t;

    CHECK(cat->version == 0 && cat->next_id == 1 && cat->ntables == 0);
    CHECK_RC(cat_create_table(cat, "users", "id", NULL), 0);
    CHECK(cat->version == 1);
    CHECK_RC(cat_create_table(cat, "events", "user", "ts"), 0);
    CHECK(cat->version == 2 && cat->ntables == 2);
    CHECK_RC(cat_create_table(cat, "users", "id", NULL), SX_EEXIST);
    CHECK_RC(cat_create_table(cat, "bad name", "id", NULL), SX_EINVAL);
    CHECK_RC(cat_create_table(cat, "ok", "bad/pk", NULL), SX_EINVAL);
    CHECK_RC(cat_create_table(cat, "ok", "id", "bad sk"), SX_EINVAL);
    CHECK_RC(cat_create_table(cat, "primary", "id", NULL), SX_EINVAL);
    CHECK(cat->version == 2 && cat->ntables == 2);

    t = cat_table_by_name(cat, "users", 5);
    CHECK(t != NULL && str_eq(t->pk, "id") && t->sk == NULL);
    t = cat_table_by_name(cat, "eventsXX", 6); /* length-bounded lookup */
    CHECK(t != NULL && str_eq(t->sk, "ts"));
    CHECK(t != NULL && cat_table_by_id(cat, t->id) == t);
    CHECK(cat_table_by_name(cat, "nope", 4) == NULL);
    CHECK(cat_table_by_id(cat, 9999) == NULL);
}

static void test_indexes(cat_catalog *cat)
{
    const char *city[] = { "city" };
    const char *two[] = { "city", "age" };
    const char *rep[] = { "city", "city" };
    const char *proj[] = { "name", "email" };
    const char *many[CAT_MAX_ATTRS + 1];
    cat_table *t = cat_table_by_name(cat, "users", 5), *owner = NULL;
    cat_index *ix;
    uint64_t v;

    for (int i = 0; i <= CAT_MAX_ATTRS; i++)
        many[i] = "a";
    v = cat->version;
    CHECK_RC(cat_create_index(cat, "users", "by_city", city, 1, CAT_PROJ_KEYS, NULL, 0), 0);
    CHECK(cat->version == v + 1);
    CHECK_RC(cat_create_index(cat, "users", "by_city_age", two, 2, CAT_PROJ_LIST, proj, 2), 0);
    CHECK_RC(cat_create_index(cat, "nope", "x", city, 1, CAT_PROJ_ALL, NULL, 0), SX_ENOTABLE);
    CHECK_RC(cat_create_index(cat, "users", "by_city", city, 1, CAT_PROJ_ALL, NULL, 0), SX_EEXIST);
    CHECK_RC(cat_create_index(cat, "users", "rep", rep, 2, CAT_PROJ_ALL, NULL, 0), SX_EINVAL);
    CHECK_RC(cat_create_index(cat, "users", "none", city, 0, CAT_PROJ_ALL, NULL, 0), SX_EINVAL);
    CHECK_RC(cat_create_index(cat, "users", "many", many, CAT_MAX_ATTRS + 1, CAT_PROJ_ALL, NULL, 0),
             SX_EINVAL);
    CHECK_RC(cat_create_index(cat, "users", "bad name", city, 1, CAT_PROJ_ALL, NULL, 0), SX_EINVAL);
    CHECK_RC(cat_create_index(cat, "users", "prep", city, 1, CAT_PROJ_LIST, rep, 2), SX_EINVAL);
    CHECK(cat->version == v + 2);

    t = cat_table_by_name(cat, "users", 5);
    CHECK(t != NULL && t->nindexes == 2);
    ix = cat_index_by_name(t, "by_city", 7);
    CHECK(ix != NULL && ix->state == CAT_BUILDING && ix->ndone == 0 && ix->nattrs == 1 &&
          ix->proj == CAT_PROJ_KEYS);
    CHECK(ix != NULL && ix->id != t->id && cat_index_by_id(cat, ix->id, &owner) == ix &&
          owner == t);
    ix = cat_index_by_name(t, "by_city_age", 11);
    CHECK(ix != NULL && ix->nproj == 2 && str_eq(ix->proj_attrs[1], "email") &&
          str_eq(ix->attrs[1], "age"));
    /* an index name may repeat on another table */
    CHECK_RC(cat_create_index(cat, "events", "by_city", city, 1, CAT_PROJ_ALL, NULL, 0), 0);
}

static void test_backfill(cat_catalog *cat)
{
    const uint64_t parts[] = { 1, 2, 3 };
    cat_table *t = cat_table_by_name(cat, "users", 5);
    cat_index *ix = t ? cat_index_by_name(t, "by_city", 7) : NULL;
    uint32_t id;

    CHECK(ix != NULL);
    if (ix == NULL)
        return;
    id = ix->id;
    CHECK_RC(cat_mark_backfilled(cat, id, 2, parts, 3), 0);
    ix = cat_index_by_id(cat, id, &t);
    CHECK(ix->state == CAT_BUILDING && ix->ndone == 1);
    CHECK_RC(cat_mark_backfilled(cat, id, 2, parts, 3), 0); /* repeat: no change */
    ix = cat_index_by_id(cat, id, &t);
    CHECK(ix->state == CAT_BUILDING && ix->ndone == 1);
    CHECK_RC(cat_mark_backfilled(cat, id, 1, parts, 3), 0);
    ix = cat_index_by_id(cat, id, &t);
    CHECK(ix->state == CAT_BUILDING);
    CHECK_RC(cat_mark_backfilled(cat, id, 3, parts, 3), 0);
    ix = cat_index_by_id(cat, id, &t);
    CHECK(ix->state == CAT_READY && ix->ndone == 3);
    CHECK_RC(cat_mark_backfilled(cat, 9999, 1, parts, 3), SX_ENOINDEX);
}

static void test_round_trip(const cat_catalog *cat)
{
    size_t n = 0, n2 = 0;
    uint8_t *p = encode(cat, &n), *p2;
    cat_catalog *back = NULL, *copy = cat_clone(cat);

    CHECK(p != NULL && n > 0);
    CHECK(copy != NULL && cat_eq(cat, copy));
    if (p == NULL)
        goto out;
    CHECK_RC(cat_decode(p, n, &back), 0);
    CHECK(back != NULL && cat_eq(cat, back));
    if (back != NULL) {
        p2 = encode(back, &n2);
        CHECK(p2 != NULL && n2 == n && memcmp(p, p2, n) == 0);
        free(p2);
    }
    /* every strict prefix is rejected (and leaks nothing under ASan) */
    for (size_t k = 0; k < n; k++) {
        cat_catalog *c = NULL;
        int rc = cat_decode(p, k, &c);
        CHECK(rc == SX_EPROTO);
        if (rc == 0)
            cat_free(c);
    }
out:
    free(p);
    cat_free(back);
    cat_free(copy);
}

static void test_drop(cat_catalog *cat)
{
    uint64_t v = cat->version;
    cat_table *t;
    cat_index *ix;
    uint32_t old_id;

    t = cat_table_by_name(cat, "users", 5);
    ix = t ? cat_index_by_name(t, "by_city", 7) : NULL;
    CHECK(ix != NULL);
    old_id = ix ? ix->id : 0;
    CHECK_RC(cat_drop_index(cat, "users", "by_city"), 0);
    CHECK(cat->version == v + 1);
    t = cat_table_by_name(cat, "users", 5);
    CHECK(t != NULL && t->nindexes == 1 && cat_index_by_name(t, "by_city", 7) == NULL);
    CHECK(cat_index_by_id(cat, old_id, &t) == NULL);
    CHECK_RC(cat_drop_index(cat, "users", "by_city"), SX_ENOINDEX);
    CHECK_RC(cat_drop_index(cat, "nope", "by_city"), SX_ENOTABLE);
    /* ids are never reused */
    {
        const char *city[] = { "city" };
        CHECK_RC(cat_create_index(cat, "users", "by_city", city, 1, CAT_PROJ_ALL, NULL, 0), 0);
        t = cat_table_by_name(cat, "users", 5);
        ix = t ? cat_index_by_name(t, "by_city", 7) : NULL;
        CHECK(ix != NULL && ix->id != old_id && ix->state == CAT_BUILDING);
    }
}

/* Decodes bytes that must be rejected. */
static void expect_bad(const char *what, const uint8_t *p, size_t n)
{
    cat_catalog *c = NULL;
    int rc = cat_decode(p, n, &c);

    CHECKF(rc != 0, "garbage accepted: %s", what);
    if (rc == 0)
        cat_free(c);
}

static void test_garbage(void)
{
    /* map header claiming 2^32-1 pairs with 5 bytes of input */
    static const uint8_t huge_map[] = { 0xdf, 0xff, 0xff, 0xff, 0xff };
    static const uint8_t an_array[] = { 0x93, 0x01, 0x02, 0x03 };
    static const uint8_t empty_map[] = { 0x80 };
    /* {"version":1,"next_id":1,"tables":5} */
    static const uint8_t tables_int[] = { 0x83, 0xa7, 'v', 'e', 'r', 's', 'i', 'o', 'n',
                                          0x01, 0xa7, 'n', 'e', 'x', 't', '_', 'i', 'd',
                                          0x01, 0xa6, 't', 'a', 'b', 'l', 'e', 's', 0x05 };
    /* {"version":1,"next_id":1,"tables":[dd ffffffff]} */
    static const uint8_t tables_huge[] = { 0x83, 0xa7, 'v',  'e',  'r',  's',  'i', 'o',
                                           'n',  0x01, 0xa7, 'n',  'e',  'x',  't', '_',
                                           'i',  'd',  0x01, 0xa6, 't',  'a',  'b', 'l',
                                           'e',  's',  0xdd, 0xff, 0xff, 0xff, 0xff };
    /* {"version":1,"next_id":1,"tables":[{"id":1}]}: table without name */
    static const uint8_t table_partial[] = { 0x83, 0xa7, 'v',  'e',  'r',  's', 'i', 'o',
                                             'n',  0x01, 0xa7, 'n',  'e',  'x', 't', '_',
                                             'i',  'd',  0x01, 0xa6, 't',  'a', 'b', 'l',
                                             'e',  's',  0x91, 0x81, 0xa2, 'i', 'd', 0x01 };
    uint8_t rnd[256];
    unsigned seed = 12345;

    expect_bad("huge map", huge_map, sizeof(huge_map));
    expect_bad("array", an_array, sizeof(an_array));
    expect_bad("empty map", empty_map, sizeof(empty_map));
    expect_bad("tables int", tables_int, sizeof(tables_int));
    expect_bad("tables huge", tables_huge, sizeof(tables_huge));
    expect_bad("table without name", table_partial, sizeof(table_partial));
    expect_bad("empty input", NULL, 0);
    /* random bytes: must never crash or leak; a map-less start is rejected */
    for (int round = 0; round < 2000; round++) {
        cat_catalog *c = NULL;
        size_t n = 1 + (size_t)(rand_r(&seed) % sizeof(rnd));
        for (size_t i = 0; i < n; i++)
            rnd[i] = (uint8_t)rand_r(&seed);
        if (cat_decode(rnd, n, &c) == 0)
            cat_free(c);
    }
}

/* Flips each byte of a valid encoding: must never crash or leak. */
static void test_mutations(const cat_catalog *cat)
{
    size_t n = 0;
    uint8_t *p = encode(cat, &n);

    CHECK(p != NULL);
    for (size_t i = 0; p != NULL && i < n; i++) {
        uint8_t keep = p[i];
        for (int x = 1; x < 256; x <<= 1) {
            cat_catalog *c = NULL;
            p[i] = (uint8_t)(keep ^ x);
            if (cat_decode(p, n, &c) == 0)
                cat_free(c);
        }
        p[i] = keep;
    }
    free(p);
}

int main(void)
{
    cat_catalog *cat = cat_new();

    CHECK(cat != NULL);
    if (cat == NULL)
        return 1;
    test_names();
    test_tables(cat);
    test_indexes(cat);
    test_round_trip(cat);
    test_backfill(cat);
    test_round_trip(cat);
    test_drop(cat);
    test_round_trip(cat);
    test_garbage();
    test_mutations(cat);
    cat_free(cat);
    cat_free(NULL);
    return CHECK_DONE();
}
