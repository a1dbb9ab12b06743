/*
 * codec_test.c — wire codec: every field kind round-trips; error replies
 * carry code and message; the bounded cursor rejects hostile frames
 * (counts beyond the bytes left, truncation, ext types, deep nesting,
 * wrong version) without allocating for them; mp_validate accepts exactly
 * one whole value (hand-built values and an encoded frame valid; empty
 * input, truncations, trailing bytes, 0xc1 and ext types refused; on
 * random bytes its verdict is the reader's); an optional trailing field
 * (OBIN, OU64) may be absent, but not of another type; a reserved buffer
 * is written in place.
 */
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "msg.h"
#include "sx_errors.h"

static void roundtrip_query(void)
{
    msg_QUERY_req q, d;
    mp_span attrs[2] = { { (const uint8_t *)"town", 4 }, { (const uint8_t *)"lastname", 8 } };
    uint8_t eq[] = { 0x91, 0xa7, 'R', 'e', 'd', 'm', 'o', 'n', 'd' }; /* ["Redmond"] */
    mp_buf b;

    memset(&q, 0, sizeof(q));
    q.table = (mp_span){ (const uint8_t *)"customers", 9 };
    q.index = (mp_span){ (const uint8_t *)"by_town", 7 };
    q.eq = (mp_span){ eq, sizeof(eq) };
    q.cond = Q_COND_PREFIX;
    q.prefix = (mp_span){ (const uint8_t *)"S", 1 };
    q.limit = 10;
    q.desc = 1;
    q.attrs.n = 2;
    q.attrs.v = attrs;
    q.consistency = Q_STRONG;
    q.token = (mp_span){ (const uint8_t *)"\x00\x01", 2 };
    mp_buf_init(&b);
    CHECK(msg_encode_req(MSG_QUERY, &q, &b) == 0);
    msg_type t;
    int is_reply = -1;
    CHECK(msg_peek((const uint8_t *)b.sb.data, b.sb.size, &t, &is_reply) == 0);
    CHECK(t == MSG_QUERY && is_reply == 0);
    CHECK(msg_decode_req(MSG_QUERY, (const uint8_t *)b.sb.data, b.sb.size, &d) == 0);
    CHECK(mp_span_eq_cstr(d.table, "customers") && mp_span_eq_cstr(d.index, "by_town"));
    CHECK(d.eq.n == sizeof(eq) && memcmp(d.eq.p, eq, sizeof(eq)) == 0);
    CHECK(d.from.n == 1 && d.from.p[0] == 0xc0); /* unset RAW travels as nil */
    CHECK(d.cond == Q_COND_PREFIX && d.limit == 10 && d.desc == 1 && d.consistency == Q_STRONG);
    CHECK(d.attrs.n == 2 && mp_span_eq_cstr(d.attrs.v[1], "lastname"));
    CHECK(d.token.n == 2 && d.token.p[1] == 1);
    msg_free_req(MSG_QUERY, &d);
    /* every truncation of the frame is rejected, never crashes */
    for (size_t n = 0; n < b.sb.size; n++) {
        CHECK(msg_decode_req(MSG_QUERY, (const uint8_t *)b.sb.data, n, &d) != 0);
        msg_free_req(MSG_QUERY, &d);
    }
    /* decoding as another type is rejected */
    msg_GET_req g;
    CHECK(msg_decode_req(MSG_GET, (const uint8_t *)b.sb.data, b.sb.size, &g) == SX_EPROTO);
    mp_buf_free(&b);
}

static void replies(void)
{
    msg_S_GET_rep r, d;
    uint64_t vers[3] = { 1, 0, UINT64_MAX };
    uint8_t item[] = { 0x81, 0xa1, 'a', 0x01 };
    mp_span items[3] = { { item, sizeof(item) }, { NULL, 0 }, { item, sizeof(item) } };
    char msg[64];
    mp_buf b;

    memset(&r, 0, sizeof(r));
    r.items.n = 3;
    r.items.v = items;
    r.versions.n = 3;
    r.versions.v = vers;
    mp_buf_init(&b);
    CHECK(msg_encode_rep(MSG_S_GET, &r, &b) == 0);
    CHECK(msg_decode_rep(MSG_S_GET, (const uint8_t *)b.sb.data, b.sb.size, &d, msg, sizeof(msg)) ==
          0);
    CHECK(d.items.n == 3 && d.items.v[1].n == 1 && d.items.v[1].p[0] == 0xc0);
    CHECK(d.versions.n == 3 && d.versions.v[2] == UINT64_MAX);
    msg_free_rep(MSG_S_GET, &d);
    mp_buf_free(&b);

    mp_buf_init(&b);
    CHECK(msg_encode_err(MSG_S_GET, SX_ENOTABLE, "no such table 'x'", &b) == 0);
    CHECK(msg_decode_rep(MSG_S_GET, (const uint8_t *)b.sb.data, b.sb.size, &d, msg, sizeof(msg)) ==
          SX_ENOTABLE);
    CHECK(strcmp(msg, "no such table 'x'") == 0);
    mp_buf_free(&b);

    /* an error reply typed otherwise (a node answers a request it cannot
     * parse as a PING) is still the node's error, code and text */
    mp_buf_init(&b);
    CHECK(msg_encode_err(MSG_PING, SX_EPROTO, "not a request frame", &b) == 0);
    CHECK(msg_decode_rep(MSG_S_GET, (const uint8_t *)b.sb.data, b.sb.size, &d, msg, sizeof(msg)) ==
          SX_EPROTO);
    CHECK(strcmp(msg, "not a request frame") == 0);
    mp_buf_free(&b);
    /* but a successful reply of another type is a malformed frame */
    msg_PING_rep pr;
    memset(&pr, 0, sizeof(pr));
    mp_buf_init(&b);
    CHECK(msg_encode_rep(MSG_PING, &pr, &b) == 0);
    CHECK(msg_decode_rep(MSG_S_GET, (const uint8_t *)b.sb.data, b.sb.size, &d, msg, sizeof(msg)) ==
          SX_EPROTO);
    CHECK(msg[0] == '\0');
    mp_buf_free(&b);
}

/* The skip as the reader's definition gives it: one mp_read per value,
 * recursively, nesting past MP_MAX_DEPTH refused. mp_skip must agree. */
static int ref_skip(mp_cur *c, int depth)
{
    mp_val v;
    int rc;

    if (depth > MP_MAX_DEPTH)
        return SX_EPROTO;
    rc = mp_read(c, &v);
    if (rc == 0 && (v.kind == MP_ARRAY || v.kind == MP_MAP))
        for (uint64_t i = 0; rc == 0 && i < (uint64_t)v.count * (v.kind == MP_MAP ? 2 : 1); i++)
            rc = ref_skip(c, depth + 1);
    return rc;
}

/* mp_skip against ref_skip on n bytes: same verdict, same end. */
static bool skip_agrees(const uint8_t *g, size_t n)
{
    mp_cur a = mp_cur_make(g, n), b = mp_cur_make(g, n);
    int ra = mp_skip(&a), rb = ref_skip(&b, 0);

    return (ra == 0) == (rb == 0) && (ra != 0 || a.p == b.p);
}

static void skips(void)
{
    static const uint8_t heads[] = { 0x91, 0x92, 0x81, 0x82, 0xdc, 0xde, 0xdd, 0xa1,
                                     0xa3, 0xd9, 0xc4, 0xcd, 0xd2, 0xcb, 0xca, 0xc0,
                                     0xc3, 0x05, 0xff, 0x90, 0x80, 0xc1, 0xd4 };
    uint8_t deep[40];
    int bad = 0;

    /* 32 open arrays then a scalar: the scalar sits at depth 32, allowed;
     * one more array puts it at 33; an empty one at depth 32 is allowed */
    memset(deep, 0x91, sizeof(deep));
    deep[MP_MAX_DEPTH] = 0x01;
    CHECK(mp_validate(deep, MP_MAX_DEPTH + 1) == 0);
    deep[MP_MAX_DEPTH] = 0x90;
    CHECK(mp_validate(deep, MP_MAX_DEPTH + 1) == 0);
    deep[MP_MAX_DEPTH] = 0x91;
    deep[MP_MAX_DEPTH + 1] = 0x01;
    CHECK(mp_validate(deep, MP_MAX_DEPTH + 2) == SX_EPROTO);
    CHECK(skip_agrees(deep, MP_MAX_DEPTH + 2) && skip_agrees(deep, MP_MAX_DEPTH + 1));
    /* random values built from headers that nest, and plain garbage */
    srand(11);
    for (int k = 0; k < 200000; k++) {
        uint8_t g[48];
        size_t n = (size_t)(rand() % (int)sizeof(g));

        for (size_t i = 0; i < n; i++)
            g[i] = k % 2 ? heads[rand() % (int)sizeof(heads)] : (uint8_t)rand();
        bad += !skip_agrees(g, n);
    }
    CHECK(bad == 0);
}

static void hostile(void)
{
    /* [1, 6, "t", array32 claiming 4294967295 items] */
    uint8_t huge[] = { 0x94, 0x01, 0x06, 0xa1, 't', 0xdd, 0xff, 0xff, 0xff, 0xff, 0xc0 };
    uint8_t badver[] = { 0x92, 0x02, 0x01 };
    uint8_t ext[] = { 0xd4, 0x01, 0x00 };
    uint8_t map32[] = { 0xdf, 0x7f, 0xff, 0xff, 0xff, 0x01 };
    uint8_t deep[64];
    msg_PUT_req p;
    msg_type t;
    int r;

    CHECK(msg_decode_req(MSG_PUT, huge, sizeof(huge), &p) == SX_EPROTO);
    CHECK(msg_peek(badver, sizeof(badver), &t, &r) == SX_EVERSION);
    CHECK(mp_validate(ext, sizeof(ext)) == SX_EPROTO);
    CHECK(mp_validate(map32, sizeof(map32)) == SX_EPROTO);
    memset(deep, 0x91, sizeof(deep));
    deep[sizeof(deep) - 1] = 0x01;
    CHECK(mp_validate(deep, sizeof(deep)) == SX_EPROTO); /* nesting beyond MP_MAX_DEPTH */
    CHECK(mp_validate(deep + 40, sizeof(deep) - 40) == 0);
    /* random garbage: never a crash, and mp_validate's verdict is the
     * reader's: 0 exactly when the bytes are one whole value (ref_skip
     * reads one and nothing is left), SX_EPROTO otherwise */
    int disagree = 0, valid = 0, invalid = 0;
    srand(3);
    for (int k = 0; k < 20000; k++) {
        uint8_t g[24];
        size_t n = (size_t)(rand() % (int)sizeof(g));
        for (size_t i = 0; i < n; i++)
            g[i] = (uint8_t)rand();
        mp_cur c = mp_cur_make(g, n);
        int want = ref_skip(&c, 0) == 0 && mp_left(&c) == 0 ? 0 : SX_EPROTO;
        int got = mp_validate(g, n);
        disagree += got != want;
        valid += want == 0;
        invalid += want != 0;
        if (msg_decode_req(MSG_PUT, g, n, &p) == 0)
            msg_free_req(MSG_PUT, &p);
    }
    CHECK_INT(disagree, 0);
    CHECK(valid > 0 && invalid > 0); /* both verdicts were exercised */
}

/* mp_validate on values built by hand: one whole value is valid; empty
 * input, a truncated value, trailing bytes, a never-used byte or an ext
 * type are not. */
static void validate(void)
{
    static const uint8_t nil[] = { 0xc0 }, fixint[] = { 0x05 }, neg[] = { 0xff },
                         str[] = { 0xa3, 'a', 'b', 'c' },
                         map[] = { 0x82, 0xa1, 'a', 0x01, 0xa1, 'b', 0x92, 0xc3, 0xc2 },
                         bin8[] = { 0xc4, 0x02, 0x00, 0x01 },
                         u64[] = { 0xcf, 1, 2, 3, 4, 5, 6, 7, 8 },
                         f64[] = { 0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0 }, empty_arr[] = { 0x90 },
                         empty_map[] = { 0x80 }, two[] = { 0x01, 0x02 },
                         str_short[] = { 0xa3, 'a', 'b' }, arr_short[] = { 0x92, 0x01 },
                         map_odd[] = { 0x81, 0xa1, 'a' }, bin_short[] = { 0xc4, 0x05, 0x00 },
                         u32_short[] = { 0xce, 0, 0 }, never[] = { 0xc1 },
                         fixext[] = { 0xd4, 0x01, 0x00 }, trail[] = { 0x91, 0x01, 0xc0 };
    mp_buf b;

    CHECK_INT(mp_validate(nil, sizeof(nil)), 0);
    CHECK_INT(mp_validate(fixint, sizeof(fixint)), 0);
    CHECK_INT(mp_validate(neg, sizeof(neg)), 0);
    CHECK_INT(mp_validate(str, sizeof(str)), 0);
    CHECK_INT(mp_validate(map, sizeof(map)), 0);
    CHECK_INT(mp_validate(bin8, sizeof(bin8)), 0);
    CHECK_INT(mp_validate(u64, sizeof(u64)), 0);
    CHECK_INT(mp_validate(f64, sizeof(f64)), 0);
    CHECK_INT(mp_validate(empty_arr, sizeof(empty_arr)), 0);
    CHECK_INT(mp_validate(empty_map, sizeof(empty_map)), 0);
    CHECK_INT(mp_validate(map, 0), SX_EPROTO);
    CHECK_INT(mp_validate(two, sizeof(two)), SX_EPROTO);
    CHECK_INT(mp_validate(trail, sizeof(trail)), SX_EPROTO);
    CHECK_INT(mp_validate(str_short, sizeof(str_short)), SX_EPROTO);
    CHECK_INT(mp_validate(arr_short, sizeof(arr_short)), SX_EPROTO);
    CHECK_INT(mp_validate(map_odd, sizeof(map_odd)), SX_EPROTO);
    CHECK_INT(mp_validate(bin_short, sizeof(bin_short)), SX_EPROTO);
    CHECK_INT(mp_validate(u32_short, sizeof(u32_short)), SX_EPROTO);
    CHECK_INT(mp_validate(never, sizeof(never)), SX_EPROTO);
    CHECK_INT(mp_validate(fixext, sizeof(fixext)), SX_EPROTO);
    /* a whole encoded frame is one value; every proper prefix is not, and
     * neither is the frame with a byte more */
    msg_PING_req ping;
    memset(&ping, 0, sizeof(ping));
    mp_buf_init(&b);
    CHECK(msg_encode_req(MSG_PING, &ping, &b) == 0);
    mp_put_u64(&b, 7);
    CHECK(!b.oom && b.sb.size >= 2);
    if (!b.oom && b.sb.size >= 2) {
        size_t whole = b.sb.size - 1;
        CHECK_INT(mp_validate(b.sb.data, whole), 0);
        CHECK_INT(mp_validate(b.sb.data, b.sb.size), SX_EPROTO);
        for (size_t n = 0; n < whole; n++)
            CHECK_INT(mp_validate(b.sb.data, n), SX_EPROTO);
    }
    mp_buf_free(&b);
}

static void ints(void)
{
    mp_buf b;
    mp_cur c;
    int64_t i;
    uint64_t u;

    mp_buf_init(&b);
    mp_put_i64(&b, -5);
    mp_put_u64(&b, UINT64_MAX);
    mp_put_i64(&b, INT64_MIN);
    c = mp_cur_make(b.sb.data, b.sb.size);
    CHECK(mp_read_u64(&c, &u) == SX_EPROTO); /* negative is not a u64 */
    CHECK(mp_read_i64(&c, &i) == 0 && i == -5);
    CHECK(mp_read_i64(&c, &i) == SX_EPROTO); /* too big for i64 */
    CHECK(mp_read_u64(&c, &u) == 0 && u == UINT64_MAX);
    CHECK(mp_read_i64(&c, &i) == 0 && i == INT64_MIN);
    CHECK(mp_left(&c) == 0);
    mp_buf_free(&b);
}

/* TABLE_CREATE's rid: an older sender's frame without it decodes with it
 * empty; sent, it round-trips; a str in its place, or a frame short of a
 * required field, does not decode. */
static void optional_field(void)
{
    msg_TABLE_CREATE_req q, d;
    uint8_t rid[16] = { 1, 2, 3 };
    mp_buf b;

    /* [1, TABLE_CREATE, "t", "id", ""] */
    const uint8_t old[] = { 0x95, 0x01, 0x02, 0xa1, 't', 0xa2, 'i', 'd', 0xa0 };
    CHECK_INT(msg_decode_req(MSG_TABLE_CREATE, old, sizeof old, &d), 0);
    CHECK(d.rid.n == 0 && d.pk.n == 2);
    msg_free_req(MSG_TABLE_CREATE, &d);
    const uint8_t short4[] = { 0x94, 0x01, 0x02, 0xa1, 't', 0xa2, 'i', 'd' };
    CHECK_INT(msg_decode_req(MSG_TABLE_CREATE, short4, sizeof short4, &d), SX_EPROTO);
    const uint8_t strid[] = { 0x96, 0x01, 0x02, 0xa1, 't', 0xa2, 'i', 'd', 0xa0, 0xa1, 'x' };
    CHECK_INT(msg_decode_req(MSG_TABLE_CREATE, strid, sizeof strid, &d), SX_EPROTO);

    memset(&q, 0, sizeof q);
    q.table = (mp_span){ (const uint8_t *)"t", 1 };
    q.pk = (mp_span){ (const uint8_t *)"id", 2 };
    q.rid = (mp_span){ rid, sizeof rid };
    mp_buf_init(&b);
    CHECK_INT(msg_encode_req(MSG_TABLE_CREATE, &q, &b), 0);
    CHECK_INT(msg_decode_req(MSG_TABLE_CREATE, (const uint8_t *)b.sb.data, b.sb.size, &d), 0);
    CHECK(d.rid.n == sizeof rid && memcmp(d.rid.p, rid, sizeof rid) == 0);
    msg_free_req(MSG_TABLE_CREATE, &d);
    mp_buf_free(&b);
}

/* DELETE's deadline_ms (an optional u64): absent decodes as 0; sent, it
 * round-trips, as the 9 bytes (0xcf, 8 big-endian) the client rewrites
 * per attempt; a str in its place does not decode. */
static void optional_u64(void)
{
    msg_DELETE_req q, d;
    mp_buf b;

    /* [1, DELETE, "t", {"id": 1}] */
    const uint8_t old[] = { 0x94, 0x01, 0x08, 0xa1, 't', 0x81, 0xa2, 'i', 'd', 0x01 };
    CHECK_INT(msg_decode_req(MSG_DELETE, old, sizeof old, &d), 0);
    CHECK(d.deadline_ms == 0 && d.key.n == 5);
    msg_free_req(MSG_DELETE, &d);
    const uint8_t strdl[] = { 0x95, 0x01, 0x08, 0xa1, 't', 0x81, 0xa2, 'i', 'd', 0x01, 0xa1, 'x' };
    CHECK_INT(msg_decode_req(MSG_DELETE, strdl, sizeof strdl, &d), SX_EPROTO);

    memset(&q, 0, sizeof q);
    q.table = (mp_span){ (const uint8_t *)"t", 1 };
    q.key = (mp_span){ old + 5, 5 };
    q.deadline_ms = 1796000000000ull; /* a Unix time in ms: needs a uint64 */
    mp_buf_init(&b);
    CHECK_INT(msg_encode_req(MSG_DELETE, &q, &b), 0);
    CHECK(b.sb.size > 9 && (uint8_t)b.sb.data[b.sb.size - 9] == 0xcf);
    CHECK_INT(msg_decode_req(MSG_DELETE, (const uint8_t *)b.sb.data, b.sb.size, &d), 0);
    CHECK(d.deadline_ms == q.deadline_ms);
    msg_free_req(MSG_DELETE, &d);
    mp_buf_free(&b);
}

/* mp_buf_reserve makes room once: the appends after it do not move the
 * buffer, the bytes are those of an unreserved buffer, and an impossible
 * reservation is sticky out-of-memory, as a failed append. */
static void reserve(void)
{
    mp_buf a, b;

    mp_buf_init(&a);
    mp_buf_init(&b);
    mp_buf_reserve(&b, 100000);
    CHECK(!b.oom && b.sb.alloc >= 100000);
    const char *at = b.sb.data;
    for (int i = 0; i < 2000; i++) {
        mp_put_u64(&a, (uint64_t)i * 977);
        mp_put_str(&a, "payload-bytes-", 14);
        mp_put_u64(&b, (uint64_t)i * 977);
        mp_put_str(&b, "payload-bytes-", 14);
    }
    CHECK(b.sb.data == at && !b.oom);
    CHECK(a.sb.size == b.sb.size && memcmp(a.sb.data, b.sb.data, a.sb.size) == 0);
    mp_buf_reserve(&b, 10); /* room enough: nothing moves */
    CHECK(b.sb.data == at);
    mp_buf_reserve(&b, SIZE_MAX);
    CHECK(b.oom);
    uint8_t *out = NULL;
    size_t n = 0;
    CHECK(mp_buf_take(&b, &out, &n) == SX_ENOMEM && out == NULL);
    mp_buf_free(&a);
    mp_buf_free(&b);
}

int main(void)
{
    reserve();
    optional_field();
    optional_u64();
    roundtrip_query();
    replies();
    hostile();
    validate();
    skips();
    ints();
    CHECK(strcmp(sx_strerror(SX_ENOTFOUND), "not found") == 0);
    CHECK(strcmp(sx_strerror(9999), "unknown error") == 0);
    return CHECK_DONE();
}
