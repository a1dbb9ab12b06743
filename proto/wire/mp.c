/*
 * mp.c — the bounded msgpack cursor (reading) and mp_buf (writing).
 *
 * The reader parses msgpack headers straight from the bytes: it never reads
 * past the end, rejects ext types, and rejects any container whose count
 * exceeds the bytes left (every element takes at least one byte) before a
 * caller could allocate for it. See mp.h.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "mp.h"
#include "sx_errors.h"

mp_cur mp_cur_make(const void *p, size_t n)
{
    mp_cur c;

    c.p = p;
    c.end = (const uint8_t *)p + n;
    return c;
}

size_t mp_left(const mp_cur *c)
{
    return (size_t)(c->end - c->p);
}

static uint64_t be(const uint8_t *p, int n)
{
    uint64_t v = 0;

    for (int i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

/* Reads a length/count field of n bytes at q+1. */
static int need(const mp_cur *c, size_t n)
{
    return mp_left(c) >= n ? 0 : SX_EPROTO;
}

static void set_uint(mp_val *v, uint64_t u)
{
    v->kind = MP_UINT;
    v->u = u;
    v->i = (int64_t)(u <= INT64_MAX ? u : 0);
}

static void set_int(mp_val *v, int64_t i)
{
    if (i >= 0) {
        set_uint(v, (uint64_t)i);
        return;
    }
    v->kind = MP_INT;
    v->i = i;
}

static int read_span(mp_cur *c, size_t hdr, size_t len, mp_kind kind, mp_val *v)
{
    if (mp_left(c) - hdr < len)
        return SX_EPROTO;
    v->kind = kind;
    v->s.p = c->p + hdr;
    v->s.n = len;
    c->p += hdr + len;
    return 0;
}

static int read_container(mp_cur *c, size_t hdr, uint64_t count, mp_kind kind, mp_val *v)
{
    size_t left = mp_left(c) - hdr;
    uint64_t min_bytes = kind == MP_MAP ? count * 2 : count;

    if (count > UINT32_MAX || min_bytes > left)
        return SX_EPROTO;
    v->kind = kind;
    v->count = (uint32_t)count;
    c->p += hdr;
    return 0;
}

int mp_read(mp_cur *c, mp_val *v)
{
    uint8_t b;
    const uint8_t *q = c->p;

    memset(v, 0, sizeof(*v));
    if (need(c, 1))
        return SX_EPROTO;
    b = q[0];
    if (b <= 0x7f) {
        set_uint(v, b);
        c->p++;
        return 0;
    }
    if (b >= 0xe0) {
        set_int(v, (int8_t)b);
        c->p++;
        return 0;
    }
    if (b >= 0x80 && b <= 0x8f)
        return read_container(c, 1, b & 0x0f, MP_MAP, v);
    if (b >= 0x90 && b <= 0x9f)
        return read_container(c, 1, b & 0x0f, MP_ARRAY, v);
    if (b >= 0xa0 && b <= 0xbf)
        return read_span(c, 1, b & 0x1f, MP_STR, v);
    switch (b) {
    case 0xc0:
        v->kind = MP_NIL;
        c->p++;
        return 0;
    case 0xc2:
        v->kind = MP_BOOL;
        v->b = false;
        c->p++;
        return 0;
    case 0xc3:
        v->kind = MP_BOOL;
        v->b = true;
        c->p++;
        return 0;
    case 0xc4:
    case 0xd9:
        if (need(c, 2))
            return SX_EPROTO;
        return read_span(c, 2, q[1], b == 0xc4 ? MP_BIN : MP_STR, v);
    case 0xc5:
    case 0xda:
        if (need(c, 3))
            return SX_EPROTO;
        return read_span(c, 3, be(q + 1, 2), b == 0xc5 ? MP_BIN : MP_STR, v);
    case 0xc6:
    case 0xdb:
        if (need(c, 5))
            return SX_EPROTO;
        return read_span(c, 5, be(q + 1, 4), b == 0xc6 ? MP_BIN : MP_STR, v);
    case 0xca: {
        uint32_t bits;
        float f;
        if (need(c, 5))
            return SX_EPROTO;
        bits = (uint32_t)be(q + 1, 4);
        memcpy(&f, &bits, sizeof(f));
        v->kind = MP_DOUBLE;
        v->d = f;
        c->p += 5;
        return 0;
    }
    case 0xcb: {
        uint64_t bits;
        if (need(c, 9))
            return SX_EPROTO;
        bits = be(q + 1, 8);
        memcpy(&v->d, &bits, sizeof(v->d));
        v->kind = MP_DOUBLE;
        c->p += 9;
        return 0;
    }
    case 0xcc:
    case 0xcd:
    case 0xce:
    case 0xcf: {
        int n = 1 << (b - 0xcc);
        if (need(c, 1 + (size_t)n))
            return SX_EPROTO;
        set_uint(v, be(q + 1, n));
        c->p += 1 + n;
        return 0;
    }
    case 0xd0:
    case 0xd1:
    case 0xd2:
    case 0xd3: {
        int n = 1 << (b - 0xd0);
        uint64_t u;
        int64_t i;
        if (need(c, 1 + (size_t)n))
            return SX_EPROTO;
        u = be(q + 1, n);
        if (n == 1)
            i = (int8_t)u;
        else if (n == 2)
            i = (int16_t)u;
        else if (n == 4)
            i = (int32_t)u;
        else
            i = (int64_t)u;
        set_int(v, i);
        c->p += 1 + n;
        return 0;
    }
    case 0xdc:
    case 0xde:
        if (need(c, 3))
            return SX_EPROTO;
        return read_container(c, 3, be(q + 1, 2), b == 0xdc ? MP_ARRAY : MP_MAP, v);
    case 0xdd:
    case 0xdf:
        if (need(c, 5))
            return SX_EPROTO;
        return read_container(c, 5, be(q + 1, 4), b == 0xdd ? MP_ARRAY : MP_MAP, v);
    default: return SX_EPROTO; /* 0xc1, ext and fixext */
    }
}

/* The extent of the value whose header starts at p (left bytes from p on):
 * *len bytes of header and payload, *kids values nested in it (a map's
 * pairs count two). Refuses what mp_read refuses: a truncated value, ext
 * types, 0xc1, a container whose count exceeds the bytes left. */
static int extent(const uint8_t *p, size_t left, size_t *len, uint64_t *kids)
{
    uint8_t b = p[0];
    size_t hdr = 1, body = 0;

    *kids = 0;
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
        *len = 1;
        return 0;
    }
    if (b <= 0x8f)
        *kids = 2 * (uint64_t)(b & 0x0f);
    else if (b <= 0x9f)
        *kids = b & 0x0f;
    else if (b <= 0xbf)
        body = b & 0x1f;
    else {
        switch (b) {
        case 0xc4:
        case 0xd9: hdr = 2; break;
        case 0xc5:
        case 0xda:
        case 0xdc:
        case 0xde: hdr = 3; break;
        case 0xc6:
        case 0xdb:
        case 0xdd:
        case 0xdf: hdr = 5; break;
        case 0xca: body = 4; break;
        case 0xcb: body = 8; break;
        case 0xcc:
        case 0xcd:
        case 0xce:
        case 0xcf: body = (size_t)1 << (b - 0xcc); break;
        case 0xd0:
        case 0xd1:
        case 0xd2:
        case 0xd3: body = (size_t)1 << (b - 0xd0); break;
        default: return SX_EPROTO; /* 0xc1, ext and fixext */
        }
        if (left < hdr)
            return SX_EPROTO;
        if (hdr > 1) {
            uint64_t n = be(p + 1, (int)hdr - 1);

            if (b == 0xdc || b == 0xdd)
                *kids = n;
            else if (b == 0xde || b == 0xdf)
                *kids = 2 * n;
            else
                body = (size_t)n;
        }
    }
    if (left - hdr < body || left - hdr < *kids)
        return SX_EPROTO;
    *len = hdr + body;
    return 0;
}

/* Skips one value without decoding it: iterative, each container's values
 * left counted per depth; nesting past MP_MAX_DEPTH is refused (a value at
 * depth MP_MAX_DEPTH may be a container only if it is empty). */
int mp_skip(mp_cur *c)
{
    uint64_t rem[MP_MAX_DEPTH + 1];
    const uint8_t *p = c->p;
    int d = 0;

    if (p >= c->end)
        return SX_EPROTO;
    rem[0] = 1;
    while (d >= 0) {
        size_t len;
        uint64_t kids;

        if (rem[d] == 0) {
            d--;
            continue;
        }
        rem[d]--;
        if (p >= c->end || extent(p, (size_t)(c->end - p), &len, &kids) != 0)
            return SX_EPROTO;
        p += len;
        if (kids > 0) {
            if (d + 1 > MP_MAX_DEPTH)
                return SX_EPROTO;
            rem[++d] = kids;
        }
    }
    c->p = p;
    return 0;
}

int mp_read_raw(mp_cur *c, mp_span *raw)
{
    const uint8_t *start = c->p;
    int rc = mp_skip(c);

    if (rc)
        return rc;
    raw->p = start;
    raw->n = (size_t)(c->p - start);
    return 0;
}

static int read_kind(mp_cur *c, mp_val *v, mp_kind want)
{
    mp_cur t = *c;
    int rc = mp_read(&t, v);

    if (rc)
        return rc;
    if (v->kind != want)
        return SX_EPROTO;
    *c = t;
    return 0;
}

int mp_read_u64(mp_cur *c, uint64_t *out)
{
    mp_val v;
    int rc = read_kind(c, &v, MP_UINT);

    if (rc == 0)
        *out = v.u;
    return rc;
}

int mp_read_i64(mp_cur *c, int64_t *out)
{
    mp_cur t = *c;
    mp_val v;
    int rc = mp_read(&t, &v);

    if (rc)
        return rc;
    if (v.kind == MP_INT)
        *out = v.i;
    else if (v.kind == MP_UINT && v.u <= INT64_MAX)
        *out = (int64_t)v.u;
    else
        return SX_EPROTO;
    *c = t;
    return 0;
}

int mp_read_str(mp_cur *c, mp_span *out)
{
    mp_val v;
    int rc = read_kind(c, &v, MP_STR);

    if (rc == 0)
        *out = v.s;
    return rc;
}

int mp_read_bin(mp_cur *c, mp_span *out)
{
    mp_val v;
    int rc = read_kind(c, &v, MP_BIN);

    if (rc == 0)
        *out = v.s;
    return rc;
}

int mp_read_array(mp_cur *c, uint32_t *count)
{
    mp_val v;
    int rc = read_kind(c, &v, MP_ARRAY);

    if (rc == 0)
        *count = v.count;
    return rc;
}

int mp_read_map(mp_cur *c, uint32_t *count)
{
    mp_val v;
    int rc = read_kind(c, &v, MP_MAP);

    if (rc == 0)
        *count = v.count;
    return rc;
}

bool mp_try_nil(mp_cur *c)
{
    if (mp_left(c) >= 1 && c->p[0] == 0xc0) {
        c->p++;
        return true;
    }
    return false;
}

int mp_validate(const void *p, size_t n)
{
    mp_cur c = mp_cur_make(p, n);
    int rc = mp_skip(&c);

    if (rc)
        return rc;
    return mp_left(&c) == 0 ? 0 : SX_EPROTO;
}

/* ---- writing ---- */

/* First allocation of a buffer. msgpack's own sbuffer starts at 8 KiB,
 * and most frames are far smaller (a query ~60 bytes, a 10-item reply
 * ~2 KiB); with glibc, every allocation past ~1 KiB first consolidates the
 * freed small chunks of its arena, so a larger first buffer would make
 * malloc_consolidate a few per cent of every daemon's and client's CPU
 * (perf; docs/PERFORMANCE.md). */
#define MP_BUF_FIRST 256u

/* The packer's writer: msgpack_sbuffer_write's doubling, from a smaller
 * start. Returns 0, or -1 when memory or size_t runs out. */
static int mp_buf_write(void *data, const char *p, size_t n)
{
    msgpack_sbuffer *sb = data;

    if (sb->alloc - sb->size < n) {
        size_t want = sb->alloc ? sb->alloc : MP_BUF_FIRST;
        if (n > SIZE_MAX - sb->size)
            return -1;
        while (want < sb->size + n) {
            if (want > SIZE_MAX / 2)
                return -1;
            want *= 2;
        }
        char *d = realloc(sb->data, want);
        if (d == NULL)
            return -1;
        sb->data = d;
        sb->alloc = want;
    }
    memcpy(sb->data + sb->size, p, n);
    sb->size += n;
    return 0;
}

void mp_buf_init(mp_buf *b)
{
    msgpack_sbuffer_init(&b->sb);
    msgpack_packer_init(&b->pk, &b->sb, mp_buf_write);
    b->oom = false;
}

void mp_buf_free(mp_buf *b)
{
    msgpack_sbuffer_destroy(&b->sb);
    b->sb.data = NULL;
    b->sb.size = 0;
    b->sb.alloc = 0;
}

void mp_buf_reserve(mp_buf *b, size_t n)
{
    char *d;

    if (b->oom || b->sb.alloc - b->sb.size >= n)
        return;
    if (n > SIZE_MAX - b->sb.size || (d = realloc(b->sb.data, b->sb.size + n)) == NULL) {
        b->oom = true;
        return;
    }
    b->sb.data = d;
    b->sb.alloc = b->sb.size + n;
}

int mp_buf_take(mp_buf *b, uint8_t **out, size_t *n)
{
    if (b->oom) {
        mp_buf_free(b);
        b->oom = false;
        return SX_ENOMEM;
    }
    if (b->sb.data == NULL) {
        *out = malloc(1);
        if (*out == NULL)
            return SX_ENOMEM;
        *n = 0;
        return 0;
    }
    *out = (uint8_t *)b->sb.data;
    *n = b->sb.size;
    b->sb.data = NULL;
    b->sb.size = 0;
    b->sb.alloc = 0;
    return 0;
}

#define MP_CHECK(call)     \
    do {                   \
        if ((call) != 0)   \
            b->oom = true; \
    } while (0)

void mp_put_nil(mp_buf *b)
{
    MP_CHECK(msgpack_pack_nil(&b->pk));
}
void mp_put_bool(mp_buf *b, bool v)
{
    MP_CHECK(v ? msgpack_pack_true(&b->pk) : msgpack_pack_false(&b->pk));
}
void mp_put_u64(mp_buf *b, uint64_t v)
{
    MP_CHECK(msgpack_pack_uint64(&b->pk, v));
}
void mp_put_i64(mp_buf *b, int64_t v)
{
    MP_CHECK(msgpack_pack_int64(&b->pk, v));
}
void mp_put_double(mp_buf *b, double v)
{
    MP_CHECK(msgpack_pack_double(&b->pk, v));
}
void mp_put_array(mp_buf *b, uint32_t n)
{
    MP_CHECK(msgpack_pack_array(&b->pk, n));
}
void mp_put_map(mp_buf *b, uint32_t n)
{
    MP_CHECK(msgpack_pack_map(&b->pk, n));
}

void mp_put_str(mp_buf *b, const void *p, size_t n)
{
    MP_CHECK(msgpack_pack_str(&b->pk, n));
    if (n)
        MP_CHECK(msgpack_pack_str_body(&b->pk, p, n));
}

void mp_put_cstr(mp_buf *b, const char *s)
{
    mp_put_str(b, s, strlen(s));
}

void mp_put_bin(mp_buf *b, const void *p, size_t n)
{
    MP_CHECK(msgpack_pack_bin(&b->pk, n));
    if (n)
        MP_CHECK(msgpack_pack_bin_body(&b->pk, p, n));
}

void mp_put_raw(mp_buf *b, const void *p, size_t n)
{
    if (n)
        MP_CHECK(mp_buf_write(&b->sb, p, n));
}

bool mp_span_eq_cstr(mp_span s, const char *cs)
{
    size_t n = strlen(cs);

    return s.n == n && (n == 0 || memcmp(s.p, cs, n) == 0);
}
