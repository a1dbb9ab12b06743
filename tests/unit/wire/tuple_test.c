/*
 * tuple_test.c — the key encoding keeps value order and never aliases:
 * integers and doubles at their boundaries, strings with NUL bytes and
 * common prefixes, type order, component splitting, strinc, and decoding
 * back to msgpack.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "tuple.h"
#include "sx_errors.h"

static tup_bytes enc_int(int64_t v)
{
    tup_bytes b = { 0 };
    tup_encode_int(&b, v);
    return b;
}
static tup_bytes enc_dbl(double v)
{
    tup_bytes b = { 0 };
    tup_encode_double(&b, v);
    return b;
}
static tup_bytes enc_str(const char *s, size_t n)
{
    tup_bytes b = { 0 };
    tup_encode_str(&b, s, n);
    return b;
}

static int cmp(tup_bytes a, tup_bytes b)
{
    int c = tup_keycmp(a.p, a.n, b.p, b.n);
    return c < 0 ? -1 : c > 0;
}

static void ints(void)
{
    int64_t v[] = { INT64_MIN, INT64_MIN + 1, -1000000, -256,          -1,       0, 1,
                    255,       256,           65536,    INT64_MAX - 1, INT64_MAX };
    size_t n = sizeof(v) / sizeof(v[0]);

    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) {
            tup_bytes a = enc_int(v[i]), b = enc_int(v[j]);
            CHECK(cmp(a, b) == (v[i] < v[j] ? -1 : v[i] > v[j]));
            tup_bytes_free(&a);
            tup_bytes_free(&b);
        }
    srand(7);
    for (int k = 0; k < 20000; k++) {
        /* build 64 random bits unsigned, then reinterpret (no signed overflow) */
        uint64_t ux = ((uint64_t)rand() << 33) ^ ((uint64_t)rand() << 2) ^ (uint64_t)rand();
        uint64_t uy = ((uint64_t)rand() << 33) ^ ((uint64_t)rand() << 2) ^ (uint64_t)rand();
        int64_t x, y;
        memcpy(&x, &ux, sizeof(x));
        memcpy(&y, &uy, sizeof(y));
        tup_bytes a = enc_int(x), b = enc_int(y);
        CHECK(cmp(a, b) == (x < y ? -1 : x > y));
        tup_bytes_free(&a);
        tup_bytes_free(&b);
    }
}

static void doubles(void)
{
    double v[] = { -INFINITY, -DBL_MAX, -1e10, -1.5, -DBL_MIN, 0.0,     DBL_MIN,
                   1e-300,    1.0,      1.5,   1e10, DBL_MAX,  INFINITY };
    size_t n = sizeof(v) / sizeof(v[0]);

    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) {
            tup_bytes a = enc_dbl(v[i]), b = enc_dbl(v[j]);
            CHECK(cmp(a, b) == (v[i] < v[j] ? -1 : v[i] > v[j]));
            tup_bytes_free(&a);
            tup_bytes_free(&b);
        }
    tup_bytes z = enc_dbl(0.0), nz = enc_dbl(-0.0);
    CHECK(cmp(z, nz) == 0); /* equal values, one encoding */
    tup_bytes_free(&z);
    tup_bytes_free(&nz);
}

static void strings(void)
{
    /* with NULs and prefixes; byte order of the raw strings is the expected order */
    struct {
        const char *s;
        size_t n;
    } v[] = {
        { "", 0 },     { "\0", 1 }, { "\0\0", 2 }, { "\0a", 2 },  { "a", 1 },        { "a\0", 2 },
        { "a\0b", 3 }, { "ab", 2 }, { "b", 1 },    { "\xff", 1 }, { "\xff\xff", 2 },
    };
    size_t n = sizeof(v) / sizeof(v[0]);

    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) {
            tup_bytes a = enc_str(v[i].s, v[i].n), b = enc_str(v[j].s, v[j].n);
            int want = tup_keycmp((const uint8_t *)v[i].s, v[i].n, (const uint8_t *)v[j].s, v[j].n);
            CHECK(cmp(a, b) == (want < 0 ? -1 : want > 0));
            tup_bytes_free(&a);
            tup_bytes_free(&b);
        }
    /* composite: ("a", 2) < ("a\0", 1): the first component decides */
    tup_bytes x = { 0 }, y = { 0 };
    tup_encode_str(&x, "a", 1);
    tup_encode_int(&x, 2);
    tup_encode_str(&y, "a\0", 2);
    tup_encode_int(&y, 1);
    CHECK(cmp(x, y) < 0);
    tup_bytes_free(&x);
    tup_bytes_free(&y);
}

static void types_and_split(void)
{
    tup_bytes k = { 0 }, pre = { 0 }, hi = { 0 };
    size_t head;
    mp_buf out;

    tup_encode_null(&k);
    tup_encode_bool(&k, false);
    tup_encode_bool(&k, true);
    tup_encode_int(&k, -5);
    tup_encode_double(&k, 2.5);
    tup_encode_str(&k, "Red\0mond", 8);
    tup_encode_bin(&k, "\x00\x01", 2);
    CHECK(k.p[0] == TUP_NULL);
    CHECK(tup_split(k.p, k.n, 7, &head) == 0 && head == k.n);
    CHECK(tup_split(k.p, k.n - 1, 7, &head) != 0); /* truncated last component */
    CHECK(tup_split(k.p, k.n, 8, &head) != 0);
    /* decode all components back to msgpack and check the string survives */
    mp_buf_init(&out);
    size_t off = 0;
    for (int i = 0; i < 7; i++) {
        size_t len = tup_decode_to_mp(k.p + off, k.n - off, &out);
        CHECK(len > 0);
        off += len;
    }
    mp_cur c = mp_cur_make(out.sb.data, out.sb.size);
    mp_val v;
    for (int i = 0; i < 5; i++)
        CHECK(mp_read(&c, &v) == 0);
    CHECK(mp_read(&c, &v) == 0 && v.kind == MP_STR && v.s.n == 8 &&
          memcmp(v.s.p, "Red\0mond", 8) == 0);
    mp_buf_free(&out);

    /* prefix bounds: every string starting with "S" sits in [pre, strinc(pre)) */
    tup_encode_str_prefix(&pre, "S", 1);
    tup_bytes_append(&hi, pre.p, pre.n);
    CHECK(tup_strinc(&hi) == 0);
    const char *in[] = { "S", "Smith", "S\xff", "Sz" }, *outside[] = { "R", "T", "s", "" };
    for (int i = 0; i < 4; i++) {
        tup_bytes a = enc_str(in[i], strlen(in[i])), b = enc_str(outside[i], strlen(outside[i]));
        CHECK(cmp(a, pre) >= 0 && cmp(a, hi) < 0);
        CHECK(cmp(b, pre) < 0 || cmp(b, hi) >= 0);
        tup_bytes_free(&a);
        tup_bytes_free(&b);
    }
    tup_bytes ff = { 0 };
    tup_bytes_append(&ff, "\xff\xff", 2);
    CHECK(tup_strinc(&ff) == SX_EINVAL);
    tup_bytes_free(&ff);
    tup_bytes_free(&k);
    tup_bytes_free(&pre);
    tup_bytes_free(&hi);
}

int main(void)
{
    ints();
    doubles();
    strings();
    types_and_split();
    return CHECK_DONE();
}
