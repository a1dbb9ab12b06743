/*
 * item_test.c — items as msgpack maps: validation, primary keys, sparse
 * index tuples, projections, views (an item read once), coverage and
 * equality filters.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "item.h"
#include "sx_errors.h"

/* Builds {"id":id, "town":town?, "lastname":ln?, "tags":[1,2]} */
static void item(mp_buf *b, int64_t id, const char *town, const char *ln)
{
    mp_buf_init(b);
    mp_put_map(b, 2 + (town != NULL) + (ln != NULL));
    mp_put_cstr(b, "id");
    mp_put_i64(b, id);
    if (town) {
        mp_put_cstr(b, "town");
        mp_put_cstr(b, town);
    }
    if (ln) {
        mp_put_cstr(b, "lastname");
        mp_put_cstr(b, ln);
    }
    mp_put_cstr(b, "tags");
    mp_put_array(b, 2);
    mp_put_u64(b, 1);
    mp_put_u64(b, 2);
}

/* An item of n attributes "a0", "a1", ...; with dup, the last one is named
 * as the first. */
static void wide_item(mp_buf *b, uint32_t n, bool dup)
{
    char name[16];

    mp_buf_init(b);
    mp_put_map(b, n);
    for (uint32_t i = 0; i < n; i++) {
        snprintf(name, sizeof(name), "a%u", dup && i == n - 1 ? 0u : i);
        mp_put_cstr(b, name);
        mp_put_u64(b, i);
    }
}

/* The most attributes an item may have, names checked for repeats. */
static void wide_items(void)
{
    mp_buf w;

    wide_item(&w, 4096, false);
    CHECK(!w.oom && item_validate((const uint8_t *)w.sb.data, w.sb.size) == 0);
    mp_buf_free(&w);
    wide_item(&w, 4096, true); /* "a0" first and last */
    CHECK(!w.oom && item_validate((const uint8_t *)w.sb.data, w.sb.size) == SX_EPROTO);
    mp_buf_free(&w);
    wide_item(&w, 4097, false);
    CHECK(!w.oom && item_validate((const uint8_t *)w.sb.data, w.sb.size) == SX_ETOOBIG);
    mp_buf_free(&w);
    wide_item(&w, 2, true); /* {"a0", "a0"} */
    CHECK(!w.oom && item_validate((const uint8_t *)w.sb.data, w.sb.size) == SX_EPROTO);
    mp_buf_free(&w);
}

/* Index tuples and projections derived from a view (read once) are those
 * derived from the item's bytes; a view refuses what is not one whole map
 * with string keys, and holds items wider than its inline room. */
static void views(const cat_table *t, const cat_index *ix, const mp_buf *a)
{
    const uint8_t *ap = (const uint8_t *)a->sb.data;
    cat_index all = *ix;
    item_view v = { 0 };
    tup_bytes k1 = { 0 }, k2 = { 0 };
    mp_buf p1, p2, w;
    uint8_t trailing[64];
    uint8_t numkey[] = { 0x81, 0x01, 0x01 };

    all.proj = CAT_PROJ_ALL;
    CHECK(item_view_parse(&v, ap, a->sb.size) == 0 && v.count == 4);
    CHECK(item_index_tuple(t, ix, ap, a->sb.size, &k1) == 0);
    CHECK(item_index_tuple_view(t, ix, &v, &k2) == 0);
    CHECK(k1.n == k2.n && memcmp(k1.p, k2.p, k1.n) == 0);
    for (int i = 0; i < 2; i++) {
        const cat_index *x = i ? &all : ix;

        mp_buf_init(&p1);
        mp_buf_init(&p2);
        CHECK(item_project(t, x, ap, a->sb.size, &p1) == 0);
        CHECK(item_project_view(t, x, &v, &p2) == 0);
        CHECK(p1.sb.size == p2.sb.size && memcmp(p1.sb.data, p2.sb.data, p1.sb.size) == 0);
        CHECK(i == 0 || p2.sb.size == a->sb.size); /* the whole item */
        mp_buf_free(&p1);
        mp_buf_free(&p2);
    }
    /* one byte more, one byte less, a number as a name: refused */
    CHECK(a->sb.size < sizeof(trailing));
    memcpy(trailing, ap, a->sb.size);
    trailing[a->sb.size] = 0x01;
    CHECK(item_view_parse(&v, trailing, a->sb.size + 1) == SX_EPROTO);
    CHECK(item_view_parse(&v, ap, a->sb.size - 1) == SX_EPROTO);
    CHECK(item_view_parse(&v, numkey, sizeof(numkey)) == SX_EPROTO);
    /* wider than the inline room, then narrow again, in one view */
    wide_item(&w, 100, false);
    CHECK(!w.oom && item_view_parse(&v, (const uint8_t *)w.sb.data, w.sb.size) == 0);
    CHECK(v.count == 100 && v.attr[2 * 99 + 1].n == 1 && v.attr[2 * 99 + 1].p[0] == 99);
    CHECK(item_view_parse(&v, ap, a->sb.size) == 0 && v.count == 4 && v.attr == v.inl);
    mp_buf_free(&w);
    wide_item(&w, 4097, false);
    CHECK(!w.oom && item_view_parse(&v, (const uint8_t *)w.sb.data, w.sb.size) == SX_ETOOBIG);
    mp_buf_free(&w);
    item_view_free(&v);
    tup_bytes_free(&k1);
    tup_bytes_free(&k2);
}

int main(void)
{
    char *attrs[] = { "town", "lastname" };
    char *proj[] = { "tags" };
    cat_table t = { .id = 1, .name = "customers", .pk = "id", .sk = NULL };
    cat_index ix = {
        .id = 2, .name = "by_town", .nattrs = 2, .attrs = attrs, .proj = CAT_PROJ_KEYS
    };
    mp_buf a, b, out;
    tup_bytes k1 = { 0 }, k2 = { 0 };
    size_t pkl;
    mp_span v;

    item(&a, 7, "Redmond", "Smith");
    item(&b, 8, "Redmond", NULL);
    const uint8_t *ap = (const uint8_t *)a.sb.data, *bp = (const uint8_t *)b.sb.data;
    CHECK(item_validate(ap, a.sb.size) == 0);
    CHECK(item_get(ap, a.sb.size, "town", &v) == 0 && v.n == 8);
    CHECK(item_get(ap, a.sb.size, "nope", &v) == SX_ENOTFOUND);
    CHECK(item_primary_key(&t, ap, a.sb.size, &k1, &pkl) == 0 && pkl == 9 && k1.n == 9);
    CHECK(item_index_tuple(&t, &ix, ap, a.sb.size, &k2) == 0);
    /* the index tuple ends with the primary key tuple */
    CHECK(k2.n > k1.n && memcmp(k2.p + k2.n - k1.n, k1.p, k1.n) == 0);
    tup_bytes_free(&k2);
    CHECK(item_index_tuple(&t, &ix, bp, b.sb.size, &k2) == SX_ENOTFOUND); /* sparse */
    tup_bytes_free(&k1);
    tup_bytes_free(&k2);

    /* projection keys: id, town, lastname but not tags */
    mp_buf_init(&out);
    CHECK(item_project(&t, &ix, ap, a.sb.size, &out) == 0);
    CHECK(item_get((const uint8_t *)out.sb.data, out.sb.size, "id", &v) == 0);
    CHECK(item_get((const uint8_t *)out.sb.data, out.sb.size, "town", &v) == 0);
    CHECK(item_get((const uint8_t *)out.sb.data, out.sb.size, "lastname", &v) == 0);
    CHECK(item_get((const uint8_t *)out.sb.data, out.sb.size, "tags", &v) == SX_ENOTFOUND);
    mp_buf_free(&out);
    CHECK(!item_covers(&t, &ix, NULL, 0));
    CHECK(item_covers(&t, &ix, attrs, 2));
    CHECK(!item_covers(&t, &ix, proj, 1));
    ix.proj = CAT_PROJ_LIST;
    ix.nproj = 1;
    ix.proj_attrs = proj;
    CHECK(item_covers(&t, &ix, proj, 1));

    /* filters compare by value */
    mp_buf w;
    mp_buf_init(&w);
    mp_put_map(&w, 1);
    mp_put_cstr(&w, "town");
    mp_put_cstr(&w, "Redmond");
    CHECK(item_matches(ap, a.sb.size, (const uint8_t *)w.sb.data, w.sb.size) == 1);
    mp_buf_free(&w);
    mp_buf_init(&w);
    mp_put_map(&w, 1);
    mp_put_cstr(&w, "lastname");
    mp_put_cstr(&w, "Smith");
    CHECK(item_matches(bp, b.sb.size, (const uint8_t *)w.sb.data, w.sb.size) == 0);
    mp_buf_free(&w);

    /* invalid items */
    uint8_t dup[] = { 0x82, 0xa1, 'a', 0x01, 0xa1, 'a', 0x02 };
    uint8_t notmap[] = { 0x91, 0x01 };
    uint8_t numkey[] = { 0x81, 0x01, 0x01 };
    CHECK(item_validate(dup, sizeof(dup)) == SX_EPROTO);
    CHECK(item_validate(notmap, sizeof(notmap)) == SX_EPROTO);
    CHECK(item_validate(numkey, sizeof(numkey)) == SX_EPROTO);
    wide_items();
    views(&t, &ix, &a);
    /* a list as a key attribute is refused */
    mp_buf l;
    mp_buf_init(&l);
    mp_put_map(&l, 1);
    mp_put_cstr(&l, "id");
    mp_put_array(&l, 0);
    CHECK(item_primary_key(&t, (const uint8_t *)l.sb.data, l.sb.size, &k1, &pkl) == SX_EKEY);
    tup_bytes_free(&k1);
    mp_buf_free(&l);
    mp_buf_free(&a);
    mp_buf_free(&b);
    return CHECK_DONE();
}
