/*
 * item_test.c — unit test of libshardex items and lists (client/lib/item.c):
 * building, replacing, removing and reading attributes; nested maps and
 * lists; deep copies; and the msgpack form — an encode/decode round trip,
 * plus every truncation and many corruptions of a valid encoding decoding
 * to an error (or a valid item), never a crash (run it under ASan).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "internal.h"

/* Deep equality of two values (via the public views). */
static int value_eq(const sx_value *a, const sx_value *b);

static int item_eq(const sx_item *a, const sx_item *b)
{
    if (sx_item_count(a) != sx_item_count(b))
        return 0;
    for (size_t k = 0; k < sx_item_count(a); k++) {
        const char *name;
        sx_value va, vb;
        sx_item_attr(a, k, &name, &va);
        if (sx_item_get(b, name, &vb) != SX_OK || !value_eq(&va, &vb))
            return 0;
    }
    return 1;
}

static int value_eq(const sx_value *a, const sx_value *b)
{
    if (a->type != b->type)
        return 0;
    switch (a->type) {
    case SX_NULL: return 1;
    case SX_BOOL: return a->b == b->b;
    case SX_INT: return a->i == b->i;
    case SX_DOUBLE: return a->d == b->d;
    case SX_STR:
    case SX_BIN: return a->len == b->len && memcmp(a->s, b->s, a->len) == 0;
    case SX_LIST:
        if (sx_list_len(a->list) != sx_list_len(b->list))
            return 0;
        for (size_t k = 0; k < sx_list_len(a->list); k++) {
            sx_value ea, eb;
            sx_list_at(a->list, k, &ea);
            sx_list_at(b->list, k, &eb);
            if (!value_eq(&ea, &eb))
                return 0;
        }
        return 1;
    case SX_MAP: return item_eq(a->map, b->map);
    }
    return 0;
}

static sx_item *sample(void)
{
    sx_item *it = sx_item_new(), *m, *m2;
    sx_list *l, *l2;
    static const char bin[] = { 0, 1, 2, (char)0xff };
    CHECK(it != NULL);
    CHECK(sx_item_set_int(it, "id", -42) == SX_OK);
    CHECK(sx_item_set_str(it, "name", "Ada") == SX_OK);
    CHECK(sx_item_set_strn(it, "nul", "a\0b", 3) == SX_OK);
    CHECK(sx_item_set_double(it, "score", 0.1) == SX_OK);
    CHECK(sx_item_set_bool(it, "ok", 1) == SX_OK);
    CHECK(sx_item_set_null(it, "nothing") == SX_OK);
    CHECK(sx_item_set_bin(it, "raw", bin, sizeof bin) == SX_OK);
    CHECK(sx_item_set_list(it, "tags", &l) == SX_OK);
    sx_value v = sx_val_str("x");
    CHECK(sx_list_append(l, &v) == SX_OK);
    v = sx_val_int(INT64_MIN);
    CHECK(sx_list_append(l, &v) == SX_OK);
    CHECK(sx_list_append_list(l, &l2) == SX_OK);
    v = sx_val_double(-2.5);
    CHECK(sx_list_append(l2, &v) == SX_OK);
    CHECK(sx_list_append_map(l, &m2) == SX_OK);
    CHECK(sx_item_set_bool(m2, "deep", 0) == SX_OK);
    CHECK(sx_item_set_map(it, "meta", &m) == SX_OK);
    CHECK(sx_item_set_int(m, "n", INT64_MAX) == SX_OK);
    return it;
}

static void test_build_and_read(void)
{
    sx_item *it = sample();
    int64_t i;
    double d;
    int b;
    const char *s;
    size_t n;
    sx_value v;
    CHECK(sx_item_count(it) == 9);
    CHECK(sx_item_get_int(it, "id", &i) == SX_OK && i == -42);
    CHECK(sx_item_get_str(it, "name", &s, &n) == SX_OK && n == 3 && strcmp(s, "Ada") == 0);
    CHECK(sx_item_get_str(it, "nul", &s, &n) == SX_OK && n == 3 && memcmp(s, "a\0b", 3) == 0);
    CHECK(sx_item_get_double(it, "score", &d) == SX_OK && d == 0.1);
    CHECK(sx_item_get_bool(it, "ok", &b) == SX_OK && b == 1);
    CHECK(sx_item_get_int(it, "name", &i) == SX_EINVAL);
    CHECK(sx_item_get_int(it, "missing", &i) == SX_ENOTFOUND);
    CHECK(sx_item_get(it, "tags", &v) == SX_OK && v.type == SX_LIST && v.len == 4);
    CHECK(sx_list_at(v.list, 4, &v) == SX_EINVAL);
    CHECK(sx_item_get(it, "meta", &v) == SX_OK && v.type == SX_MAP && v.len == 1);
    CHECK(sx_item_get_int(v.map, "n", &i) == SX_OK && i == INT64_MAX);
    /* replace keeps the position and count; remove shifts */
    CHECK(sx_item_set_str(it, "id", "seven") == SX_OK);
    CHECK(sx_item_count(it) == 9);
    const char *name;
    CHECK(sx_item_attr(it, 0, &name, &v) == SX_OK && strcmp(name, "id") == 0 && v.type == SX_STR);
    CHECK(sx_item_remove(it, "id") == SX_OK && sx_item_count(it) == 8);
    CHECK(sx_item_remove(it, "id") == SX_ENOTFOUND);
    CHECK(sx_item_attr(it, 0, &name, NULL) == SX_OK && strcmp(name, "name") == 0);
    CHECK(sx_item_attr(it, 8, &name, NULL) == SX_EINVAL);
    CHECK(sx_item_set_int(it, "", 1) == SX_EINVAL);
    CHECK(sx_item_set_int(it, NULL, 1) == SX_EINVAL);
    CHECK(sx_item_set_str(it, "s", NULL) == SX_EINVAL);
    /* a caller-made list view is deep-copied */
    sx_list *own = sx_list_new();
    v = sx_val_int(5);
    CHECK(sx_list_append(own, &v) == SX_OK);
    sx_value lv = { .type = SX_LIST, .list = own };
    CHECK(sx_item_set_value(it, "copy", &lv) == SX_OK);
    sx_list_free(own);
    CHECK(sx_item_get(it, "copy", &v) == SX_OK && v.type == SX_LIST && v.len == 1);
    sx_item_free(it);
    sx_item_free(NULL);
    sx_list_free(NULL);
}

static void encode(const sx_item *it, uint8_t **p, size_t *n)
{
    mp_buf b;
    mp_buf_init(&b);
    cl_item_encode(it, &b);
    CHECK(mp_buf_take(&b, p, n) == 0);
    mp_buf_free(&b);
}

static void test_round_trip_and_clone(void)
{
    sx_item *it = sample(), *back = NULL, *copy = sx_item_clone(it);
    uint8_t *p;
    size_t n;
    encode(it, &p, &n);
    CHECK(mp_validate(p, n) == 0);
    CHECK(cl_item_decode(p, n, &back) == SX_OK);
    CHECK(back && item_eq(it, back) && item_eq(back, it));
    CHECK(copy && item_eq(it, copy));
    /* the copy is independent */
    CHECK(sx_item_set_int(copy, "name", 1) == SX_OK);
    CHECK(!item_eq(it, copy));
    /* every truncation fails cleanly */
    for (size_t k = 0; k < n; k++) {
        sx_item *t = NULL;
        CHECK(cl_item_decode(p, k, &t) != SX_OK);
        CHECK(t == NULL);
    }
    /* corruptions: an error or some item, never a crash or a leak */
    uint8_t *q = malloc(n);
    for (size_t k = 0; k < n; k++) {
        for (int x = 0; x < 256; x += 17) {
            sx_item *t = NULL;
            memcpy(q, p, n);
            q[k] = (uint8_t)x;
            if (cl_item_decode(q, n, &t) == SX_OK)
                sx_item_free(t);
        }
    }
    free(q);
    /* not a map, or a map with a non-string key */
    static const uint8_t arr[] = { 0x91, 0x01 }, intkey[] = { 0x81, 0x01, 0x02 };
    sx_item *t = NULL;
    CHECK(cl_item_decode(arr, sizeof arr, &t) == SX_EPROTO);
    CHECK(cl_item_decode(intkey, sizeof intkey, &t) == SX_EPROTO);
    free(p);
    sx_item_free(it);
    sx_item_free(back);
    sx_item_free(copy);
}

/* A decoded item keeps its names and strings in one block: replacing,
 * removing and adding attributes afterwards must free only what was
 * allocated on its own (ASan reports a bad free or a leak). */
static void test_decoded_then_edited(void)
{
    sx_item *it = sx_item_new(), *d = NULL;
    uint8_t *p;
    size_t n;
    sx_value v;
    CHECK(it && sx_item_set_str(it, "town", "Redmond") == SX_OK);
    CHECK(sx_item_set_str(it, "lastname", "Smith") == SX_OK);
    CHECK(sx_item_set_int(it, "id", 7) == SX_OK);
    encode(it, &p, &n);
    CHECK(cl_item_decode(p, n, &d) == SX_OK && d != NULL);
    free(p); /* the decoded item holds no pointer into the frame */
    if (d == NULL) {
        sx_item_free(it);
        return;
    }
    CHECK(sx_item_get(d, "town", &v) == SX_OK && v.type == SX_STR && v.len == 7 &&
          strcmp(v.s, "Redmond") == 0);
    CHECK(sx_item_set_str(d, "town", "Kirkland") == SX_OK); /* replaced */
    CHECK(sx_item_remove(d, "lastname") == SX_OK);          /* removed */
    CHECK(sx_item_set_str(d, "a", "1") == SX_OK);           /* grown */
    CHECK(sx_item_set_str(d, "b", "2") == SX_OK);
    CHECK(sx_item_set_int(d, "c", 3) == SX_OK);
    CHECK(sx_item_count(d) == 5);
    CHECK(sx_item_get(d, "town", &v) == SX_OK && strcmp(v.s, "Kirkland") == 0);
    CHECK(sx_item_get(d, "lastname", &v) == SX_ENOTFOUND);
    CHECK(sx_item_get(d, "id", &v) == SX_OK && v.type == SX_INT && v.i == 7);
    sx_item *c = sx_item_clone(d);
    CHECK(c && item_eq(c, d));
    sx_item_free(d);
    CHECK(c && sx_item_get(c, "b", &v) == SX_OK && strcmp(v.s, "2") == 0);
    sx_item_free(c);
    sx_item_free(it);
    /* the empty item */
    static const uint8_t empty[] = { 0x80 };
    d = NULL;
    CHECK(cl_item_decode(empty, sizeof empty, &d) == SX_OK && d && sx_item_count(d) == 0);
    CHECK(d && sx_item_set_int(d, "x", 1) == SX_OK && sx_item_count(d) == 1);
    sx_item_free(d);
}

static void test_depth_limit(void)
{
    /* {"a":[[[[...]]]]} nested far beyond MP_MAX_DEPTH is rejected */
    uint8_t buf[300];
    size_t n = 0;
    buf[n++] = 0x81;
    buf[n++] = 0xa1;
    buf[n++] = 'a';
    while (n < sizeof buf - 1)
        buf[n++] = 0x91;
    buf[n++] = 0x01;
    sx_item *t = NULL;
    CHECK(cl_item_decode(buf, n, &t) == SX_EPROTO);
    CHECK(t == NULL);
}

int main(void)
{
    test_build_and_read();
    test_round_trip_and_clone();
    test_decoded_then_edited();
    test_depth_limit();
    return CHECK_DONE();
}
