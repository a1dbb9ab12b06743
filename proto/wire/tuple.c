/*
 * tuple.c — order-preserving tuple encoding of key components (see tuple.h
 * for the byte layout and proto/PROTOCOL.md for the rationale).
 */
#include <stdlib.h>
#include <string.h>
#include "tuple.h"
#include "hash.h"
#include "sx_errors.h"

int tup_bytes_append(tup_bytes *b, const void *p, size_t n)
{
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        uint8_t *q;

        while (cap < b->n + n)
            cap *= 2;
        q = realloc(b->p, cap);
        if (q == NULL)
            return SX_ENOMEM;
        b->p = q;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, p, n);
    b->n += n;
    return 0;
}

void tup_bytes_free(tup_bytes *b)
{
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

static int put_tag(tup_bytes *key, uint8_t tag)
{
    return tup_bytes_append(key, &tag, 1);
}

int tup_encode_null(tup_bytes *key)
{
    return put_tag(key, TUP_NULL);
}

int tup_encode_bool(tup_bytes *key, bool v)
{
    return put_tag(key, v ? TUP_TRUE : TUP_FALSE);
}

int tup_encode_int(tup_bytes *key, int64_t v)
{
    uint8_t b[9];

    b[0] = TUP_INT;
    be_put64(b + 1, (uint64_t)v ^ (UINT64_C(1) << 63));
    return tup_bytes_append(key, b, sizeof(b));
}

int tup_encode_double(tup_bytes *key, double v)
{
    uint8_t b[9];
    uint64_t bits;

    if (v == 0)
        v = 0.0; /* -0.0 and 0.0 are equal values: one encoding */
    memcpy(&bits, &v, sizeof(bits));
    if (bits & (UINT64_C(1) << 63))
        bits = ~bits;
    else
        bits ^= UINT64_C(1) << 63;
    b[0] = TUP_DOUBLE;
    be_put64(b + 1, bits);
    return tup_bytes_append(key, b, sizeof(b));
}

static int escaped(tup_bytes *key, uint8_t tag, const uint8_t *p, size_t n, bool terminate)
{
    static const uint8_t esc[2] = { 0x00, 0xFF };
    size_t start = 0;
    int rc = put_tag(key, tag);

    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (p[i] != 0)
            continue;
        rc = tup_bytes_append(key, p + start, i - start);
        if (rc == 0)
            rc = tup_bytes_append(key, esc, 2);
        start = i + 1;
    }
    if (rc == 0)
        rc = tup_bytes_append(key, p + start, n - start);
    if (rc == 0 && terminate)
        rc = tup_bytes_append(key, esc, 1);
    return rc;
}

int tup_encode_str(tup_bytes *key, const void *p, size_t n)
{
    return escaped(key, TUP_STR, p, n, true);
}

int tup_encode_bin(tup_bytes *key, const void *p, size_t n)
{
    return escaped(key, TUP_BIN, p, n, true);
}

int tup_encode_str_prefix(tup_bytes *key, const void *p, size_t n)
{
    return escaped(key, TUP_STR, p, n, false);
}

int tup_encode_mp(tup_bytes *key, mp_cur *c)
{
    mp_val v;
    int rc = mp_read(c, &v);

    if (rc)
        return rc;
    switch (v.kind) {
    case MP_NIL: return tup_encode_null(key);
    case MP_BOOL: return tup_encode_bool(key, v.b);
    case MP_INT: return tup_encode_int(key, v.i);
    case MP_UINT:
        if (v.u > INT64_MAX)
            return SX_EKEY;
        return tup_encode_int(key, (int64_t)v.u);
    case MP_DOUBLE: return tup_encode_double(key, v.d);
    case MP_STR: return tup_encode_str(key, v.s.p, v.s.n);
    case MP_BIN: return tup_encode_bin(key, v.s.p, v.s.n);
    default: return SX_EKEY; /* lists and maps are not key-able */
    }
}

/* Length of an escaped, 0x00-terminated body starting at p; 0 if unterminated. */
static size_t escaped_len(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i] != 0)
            continue;
        if (i + 1 < n && p[i + 1] == 0xFF) {
            i++;
            continue;
        }
        return i + 1;
    }
    return 0;
}

size_t tup_component_len(const uint8_t *p, size_t n)
{
    size_t body;

    if (n == 0)
        return 0;
    switch (p[0]) {
    case TUP_NULL:
    case TUP_FALSE:
    case TUP_TRUE: return 1;
    case TUP_INT:
    case TUP_DOUBLE: return n >= 9 ? 9 : 0;
    case TUP_STR:
    case TUP_BIN: body = escaped_len(p + 1, n - 1); return body ? body + 1 : 0;
    default: return 0;
    }
}

int tup_split(const uint8_t *p, size_t n, unsigned k, size_t *head_len)
{
    size_t off = 0;

    for (unsigned i = 0; i < k; i++) {
        size_t len = tup_component_len(p + off, n - off);
        if (len == 0)
            return SX_EPROTO;
        off += len;
    }
    *head_len = off;
    return 0;
}

static size_t decode_escaped(const uint8_t *p, size_t n, mp_buf *out, bool is_str)
{
    size_t len = tup_component_len(p, n);
    uint8_t *tmp;
    size_t m = 0;

    if (len == 0)
        return 0;
    tmp = malloc(len);
    if (tmp == NULL) {
        out->oom = true;
        return len;
    }
    for (size_t i = 1; i + 1 < len; i++) {
        tmp[m++] = p[i];
        if (p[i] == 0)
            i++; /* skip the 0xFF escape */
    }
    if (is_str)
        mp_put_str(out, tmp, m);
    else
        mp_put_bin(out, tmp, m);
    free(tmp);
    return len;
}

size_t tup_decode_to_mp(const uint8_t *p, size_t n, mp_buf *out)
{
    size_t len = tup_component_len(p, n);
    uint64_t bits;
    double d;

    if (len == 0)
        return 0;
    switch (p[0]) {
    case TUP_NULL: mp_put_nil(out); return 1;
    case TUP_FALSE: mp_put_bool(out, false); return 1;
    case TUP_TRUE: mp_put_bool(out, true); return 1;
    case TUP_INT: mp_put_i64(out, (int64_t)(be_get64(p + 1) ^ (UINT64_C(1) << 63))); return 9;
    case TUP_DOUBLE:
        bits = be_get64(p + 1);
        if (bits & (UINT64_C(1) << 63))
            bits ^= UINT64_C(1) << 63;
        else
            bits = ~bits;
        memcpy(&d, &bits, sizeof(d));
        mp_put_double(out, d);
        return 9;
    case TUP_STR: return decode_escaped(p, n, out, true);
    case TUP_BIN: return decode_escaped(p, n, out, false);
    default: return 0;
    }
}

int tup_strinc(tup_bytes *key)
{
    while (key->n > 0 && key->p[key->n - 1] == 0xFF)
        key->n--;
    if (key->n == 0)
        return SX_EINVAL;
    key->p[key->n - 1]++;
    return 0;
}

int tup_keycmp(const uint8_t *a, size_t an, const uint8_t *b, size_t bn)
{
    size_t m = an < bn ? an : bn;
    int c = m ? memcmp(a, b, m) : 0;

    if (c != 0)
        return c;
    return an < bn ? -1 : an > bn ? 1 : 0;
}
