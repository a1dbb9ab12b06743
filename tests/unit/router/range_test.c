/*
 * range_test.c — the router's query key arithmetic (router/range.c): eq
 * values, range/prefix/none conditions checked by membership of real
 * encoded keys (inclusive bounds, no over-reach into longer strings or
 * other types), empty ranges, resumption after a consumed key, and
 * clipping to index partitions as index-local keys.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "range.h"
#include "hash.h"
#include "tuple.h"
#include "sx_errors.h"

/* msgpack of one string / int / array of strings, in a fresh buffer. */
static mp_span mp_of_str(mp_buf *b, const char *s)
{
    mp_buf_init(b);
    mp_put_cstr(b, s);
    return (mp_span){ (const uint8_t *)b->sb.data, b->sb.size };
}

static mp_span mp_of_int(mp_buf *b, int64_t v)
{
    mp_buf_init(b);
    mp_put_i64(b, v);
    return (mp_span){ (const uint8_t *)b->sb.data, b->sb.size };
}

/* Index tuple: value component(s) then an int primary key. */
static tup_bytes key_s(const char *v, int64_t pk)
{
    tup_bytes k = { 0 };
    tup_encode_str(&k, v, strlen(v));
    tup_encode_int(&k, pk);
    return k;
}

static tup_bytes key_i(int64_t v, int64_t pk)
{
    tup_bytes k = { 0 };
    tup_encode_int(&k, v);
    tup_encode_int(&k, pk);
    return k;
}

static bool in_range(const rt_range *r, tup_bytes k)
{
    bool in = tup_keycmp(k.p, k.n, r->lo.p, r->lo.n) >= 0 &&
              (r->hi_open || tup_keycmp(k.p, k.n, r->hi.p, r->hi.n) < 0);
    tup_bytes_free(&k);
    return in;
}

static const mp_span NIL = { NULL, 0 };

static void eq_values(void)
{
    mp_buf b;
    tup_bytes out = { 0 };
    uint32_t k = 99;
    rt_err e;

    CHECK(rt_eq_encode(NIL, 2, &out, &k, &e) == 0 && k == 0 && out.n == 0);
    mp_buf_init(&b);
    mp_put_array(&b, 2);
    mp_put_cstr(&b, "Redmond");
    mp_put_i64(&b, 7);
    CHECK(rt_eq_encode((mp_span){ (const uint8_t *)b.sb.data, b.sb.size }, 2, &out, &k, &e) == 0 &&
          k == 2);
    {
        tup_bytes want = key_s("Redmond", 7);
        CHECK(tup_keycmp(out.p, out.n, want.p, want.n) == 0);
        tup_bytes_free(&want);
    }
    out.n = 0;
    CHECK(rt_eq_encode((mp_span){ (const uint8_t *)b.sb.data, b.sb.size }, 1, &out, &k, &e) ==
          SX_EINVAL);
    CHECK(strstr(e.msg, "at most 1") != NULL);
    mp_buf_free(&b);

    mp_buf_init(&b);
    mp_put_array(&b, 1);
    mp_put_map(&b, 0);
    out.n = 0;
    CHECK(rt_eq_encode((mp_span){ (const uint8_t *)b.sb.data, b.sb.size }, 3, &out, &k, &e) ==
          SX_EKEY);
    mp_buf_free(&b);

    mp_buf_init(&b);
    mp_put_cstr(&b, "not an array");
    out.n = 0;
    CHECK(rt_eq_encode((mp_span){ (const uint8_t *)b.sb.data, b.sb.size }, 3, &out, &k, &e) ==
          SX_EINVAL);
    mp_buf_free(&b);
    tup_bytes_free(&out);
}

static void cond_none(void)
{
    rt_range r = { 0 };
    tup_bytes base = { 0 };
    rt_err e;

    /* no eq, no condition: the whole index */
    CHECK(rt_range_build(NULL, 0, Q_COND_NONE, NIL, NIL, NIL, "a", &r, &e) == 0);
    CHECK(r.lo.n == 0 && r.hi_open);
    CHECK(in_range(&r, key_s("", 1)) && in_range(&r, key_i(-5, 1)));
    rt_range_free(&r);

    memset(&r, 0, sizeof(r));
    tup_encode_str(&base, "Redmond", 7);
    CHECK(rt_range_build(base.p, base.n, Q_COND_NONE, NIL, NIL, NIL, "town", &r, &e) == 0);
    CHECK(!r.hi_open);
    CHECK(in_range(&r, key_s("Redmond", 1)));
    CHECK(in_range(&r, key_s("Redmond", 99999)));
    CHECK(!in_range(&r, key_s("Redmonda", 1))); /* longer string: other value */
    CHECK(!in_range(&r, key_s("Redmon", 1)));
    CHECK(!in_range(&r, key_s("Seattle", 1)));
    CHECK(!rt_range_empty(&r));
    rt_range_free(&r);
    tup_bytes_free(&base);
}

static void cond_range(void)
{
    rt_range r = { 0 };
    mp_buf fb, tb;
    mp_span from = mp_of_str(&fb, "Bellevue"), to = mp_of_str(&tb, "Kirkland");
    rt_err e;

    CHECK(rt_range_build(NULL, 0, Q_COND_RANGE, from, to, NIL, "town", &r, &e) == 0);
    CHECK(in_range(&r, key_s("Bellevue", 1))); /* inclusive from */
    CHECK(in_range(&r, key_s("Chicago", 1)));
    CHECK(in_range(&r, key_s("Kirkland", 7))); /* inclusive to */
    CHECK(!in_range(&r, key_s("Kirklanda", 7)));
    CHECK(!in_range(&r, key_s("Bell", 1)));
    CHECK(!in_range(&r, key_s("Redmond", 1)));
    CHECK(!in_range(&r, key_i(5, 1))); /* other type */
    rt_range_free(&r);
    mp_buf_free(&fb);
    mp_buf_free(&tb);

    /* reversed bounds: empty */
    memset(&r, 0, sizeof(r));
    from = mp_of_str(&fb, "Z");
    to = mp_of_str(&tb, "A");
    CHECK(rt_range_build(NULL, 0, Q_COND_RANGE, from, to, NIL, "town", &r, &e) == 0);
    CHECK(rt_range_empty(&r));
    rt_range_free(&r);
    mp_buf_free(&fb);
    mp_buf_free(&tb);

    /* integers, open above */
    memset(&r, 0, sizeof(r));
    from = mp_of_int(&fb, -3);
    CHECK(rt_range_build(NULL, 0, Q_COND_RANGE, from, NIL, NIL, "n", &r, &e) == 0);
    CHECK(in_range(&r, key_i(-3, 0)) && in_range(&r, key_i(INT64_MAX, 0)));
    CHECK(!in_range(&r, key_i(-4, 0)));
    CHECK(in_range(&r, key_s("x", 0))); /* strings sort after ints: open above */
    rt_range_free(&r);
    mp_buf_free(&fb);

    /* a map bound is not a key value */
    memset(&r, 0, sizeof(r));
    mp_buf_init(&fb);
    mp_put_map(&fb, 0);
    CHECK(rt_range_build(NULL, 0, Q_COND_RANGE,
                         (mp_span){ (const uint8_t *)fb.sb.data, fb.sb.size }, NIL, NIL, "n", &r,
                         &e) == SX_EKEY);
    CHECK(strstr(e.msg, "'from'") != NULL);
    rt_range_free(&r);
    mp_buf_free(&fb);

    memset(&r, 0, sizeof(r));
    CHECK(rt_range_build(NULL, 0, 7, NIL, NIL, NIL, "n", &r, &e) == SX_EINVAL);
    rt_range_free(&r);
}

static void cond_prefix(void)
{
    rt_range r = { 0 };
    tup_bytes base = { 0 };
    mp_span pre = { (const uint8_t *)"Sea", 3 };
    rt_err e;

    tup_encode_int(&base, 42); /* eq on a first attribute */
    CHECK(rt_range_build(base.p, base.n, Q_COND_PREFIX, NIL, NIL, pre, "town", &r, &e) == 0);
    {
        tup_bytes k = { 0 };
        tup_encode_int(&k, 42);
        tup_encode_str(&k, "Seattle", 7);
        tup_encode_int(&k, 1);
        CHECK(in_range(&r, k));
    }
    {
        tup_bytes k = { 0 };
        tup_encode_int(&k, 42);
        tup_encode_str(&k, "Sea", 3);
        CHECK(in_range(&r, k));
    }
    {
        tup_bytes k = { 0 };
        tup_encode_int(&k, 42);
        tup_encode_str(&k, "Se", 2);
        CHECK(!in_range(&r, k));
    }
    {
        tup_bytes k = { 0 };
        tup_encode_int(&k, 42);
        tup_encode_str(&k, "Seb", 3);
        CHECK(!in_range(&r, k));
    }
    {
        tup_bytes k = { 0 };
        tup_encode_int(&k, 43);
        tup_encode_str(&k, "Seattle", 7);
        CHECK(!in_range(&r, k));
    }
    rt_range_free(&r);
    tup_bytes_free(&base);
}

static void resume(void)
{
    rt_range r = { 0 };
    tup_bytes a = key_s("Redmond", 1), b = key_s("Redmond", 2), z = key_s("Zzz", 1);
    tup_bytes base = { 0 };
    rt_err e;

    tup_encode_str(&base, "Redmond", 7);
    CHECK(rt_range_build(base.p, base.n, Q_COND_NONE, NIL, NIL, NIL, "t", &r, &e) == 0);
    CHECK(rt_range_resume(&r, z.p, z.n, false) == SX_ETOKEN); /* outside */
    CHECK(rt_range_resume(&r, a.p, a.n, false) == 0);
    CHECK(!in_range(&r, key_s("Redmond", 1))); /* consumed */
    CHECK(in_range(&r, key_s("Redmond", 2)));
    rt_range_free(&r);

    memset(&r, 0, sizeof(r));
    CHECK(rt_range_build(base.p, base.n, Q_COND_NONE, NIL, NIL, NIL, "t", &r, &e) == 0);
    CHECK(rt_range_resume(&r, b.p, b.n, true) == 0);
    CHECK(!in_range(&r, key_s("Redmond", 2)));
    CHECK(in_range(&r, key_s("Redmond", 1)));
    rt_range_free(&r);
    tup_bytes_free(&a);
    tup_bytes_free(&b);
    tup_bytes_free(&z);
    tup_bytes_free(&base);
}

static void clip(void)
{
    tup_bytes m = { 0 }, lo = { 0 }, hi = { 0 }, base = { 0 };
    cfg_part p1, p2;
    rt_range r = { 0 };
    rt_err e;

    tup_encode_str(&m, "M", 1);
    memset(&p1, 0, sizeof(p1));
    memset(&p2, 0, sizeof(p2));
    p1.hi = m.p;
    p1.hi_n = m.n;
    p2.lo = m.p;
    p2.lo_n = m.n;

    CHECK(rt_range_build(NULL, 0, Q_COND_NONE, NIL, NIL, NIL, "t", &r, &e) == 0);
    CHECK(rt_range_clip(&r, &p1, 7, &lo, &hi) == 1);
    CHECK(lo.n == 4 && be_get32(lo.p) == 7);
    CHECK(hi.n == 4 + m.n && memcmp(hi.p + 4, m.p, m.n) == 0);
    lo.n = hi.n = 0;
    CHECK(rt_range_clip(&r, &p2, 7, &lo, &hi) == 1);
    CHECK(lo.n == 4 + m.n && hi.n == 0); /* unbounded: to the end of index 7 */
    rt_range_free(&r);

    memset(&r, 0, sizeof(r));
    tup_encode_str(&base, "Redmond", 7);
    CHECK(rt_range_build(base.p, base.n, Q_COND_NONE, NIL, NIL, NIL, "t", &r, &e) == 0);
    lo.n = hi.n = 0;
    CHECK(rt_range_clip(&r, &p1, 7, &lo, &hi) == 0);
    CHECK(rt_range_clip(&r, &p2, 7, &lo, &hi) == 1);
    CHECK(be_get32(lo.p) == 7 && lo.n == 4 + base.n && memcmp(lo.p + 4, base.p, base.n) == 0);
    CHECK(be_get32(hi.p) == 7 && hi.n == 4 + base.n);
    rt_range_free(&r);
    tup_bytes_free(&lo);
    tup_bytes_free(&hi);
    tup_bytes_free(&m);
    tup_bytes_free(&base);
}

int main(void)
{
    eq_values();
    cond_none();
    cond_range();
    cond_prefix();
    resume();
    clip();
    return CHECK_DONE();
}
