/*
 * outbox_test.c — unit test of node/storage/outbox.c, the outbox's stored format:
 * a chunk of records reads back record for record (seqs, kinds, versions,
 * keys, hashes, projections or nil), a reset chunk is reused with a right
 * header (a large one's buffer freed, not kept), a chunk closes at its
 * record and byte caps, a value of the
 * older one-record format still reads (its seq taken from the key), and
 * malformed values are errors, never a crash or a short read taken as whole.
 * Standalone (no leveldb, no nng): main() returns non-zero on any failure.
 */
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include "check.h"
#include "hash.h"
#include "outbox.h"
#include "sx_errors.h"

static const uint8_t proj[] = { 0x81, 0xa1, 'a', 0x07 }; /* {"a": 7} */

/* Adds record i (seq 10 + 2i, key "k<i>", a projection on even i). */
static int add_rec(ob_chunk *c, uint32_t i)
{
    char key[16];
    int kn = snprintf(key, sizeof(key), "k%u", i);

    return ob_chunk_add(c, 10 + 2 * (uint64_t)i, i % 2, 1000 + i, (const uint8_t *)key, (size_t)kn,
                        77 * (uint64_t)i, i % 2 ? NULL : proj, i % 2 ? 0 : sizeof(proj));
}

/* Reads value v back and checks it holds records from..from+n-1 of add_rec. */
static void check_records(const uint8_t *v, size_t vn, uint32_t from, uint32_t n)
{
    ob_reader r;
    ob_rec rec;
    uint32_t cnt = 0, i = 0;
    int rc;

    CHECK_INT(ob_reader_open(&r, v, vn, 10 + 2 * (uint64_t)(from + n - 1), &cnt), 0);
    CHECK_INT(cnt, n);
    CHECK_INT(ob_value_count(v, vn), n);
    while ((rc = ob_reader_next(&r, &rec)) == 0) {
        uint32_t k = from + i;
        char key[16];
        int kn = snprintf(key, sizeof(key), "k%u", k);

        CHECK_INT(rec.seq, 10 + 2 * (uint64_t)k);
        CHECK_INT(rec.kind, k % 2);
        CHECK_INT(rec.version, 1000 + k);
        CHECK_INT(rec.h, 77 * (uint64_t)k);
        CHECK(rec.key.n == (size_t)kn && memcmp(rec.key.p, key, rec.key.n) == 0);
        if (k % 2)
            CHECK(rec.proj.n == 1 && rec.proj.p[0] == 0xc0); /* nil */
        else
            CHECK(rec.proj.n == sizeof(proj) && memcmp(rec.proj.p, proj, sizeof(proj)) == 0);
        i++;
    }
    CHECK_INT(rc, SX_ENOTFOUND);
    CHECK_INT(i, n);
}

static void test_roundtrip_and_reuse(void)
{
    ob_chunk c;
    const uint8_t *v;
    size_t vn = 0;

    ob_chunk_init(&c);
    for (uint32_t i = 0; i < 3; i++)
        CHECK_INT(add_rec(&c, i), 0);
    CHECK_INT(c.n, 3);
    CHECK_INT(c.last, 14);
    CHECK(!ob_chunk_full(&c));
    v = ob_chunk_value(&c, &vn);
    check_records(v, vn, 0, 3);
    /* reused: the next chunk starts with its own header and count */
    ob_chunk_reset(&c);
    CHECK_INT(c.n, 0);
    for (uint32_t i = 3; i < 8; i++)
        CHECK_INT(add_rec(&c, i), 0);
    v = ob_chunk_value(&c, &vn);
    check_records(v, vn, 3, 5);
    ob_chunk_free(&c);
}

static void test_caps(void)
{
    ob_chunk c;
    uint32_t i = 0;
    static uint8_t big[64 * 1024];

    ob_chunk_init(&c);
    while (!ob_chunk_full(&c) && i < 10 * OB_CHUNK_MAX_RECORDS)
        CHECK_INT(add_rec(&c, i++), 0);
    CHECK_INT(c.n, OB_CHUNK_MAX_RECORDS);
    ob_chunk_reset(&c);
    /* bytes: 64 KiB projections close it at 1 MiB, well before 512 records */
    big[0] = 0xc6; /* bin32 header, then its length */
    be_put32(big + 1, sizeof(big) - 5);
    i = 0;
    while (!ob_chunk_full(&c) && i < OB_CHUNK_MAX_RECORDS) {
        CHECK_INT(ob_chunk_add(&c, 1 + i, 0, 1, (const uint8_t *)"k", 1, 0, big, sizeof(big)), 0);
        i++;
    }
    CHECK_INT(c.n, OB_CHUNK_MAX_BYTES / sizeof(big));
    CHECK(c.buf.sb.size >= OB_CHUNK_MAX_BYTES);
    /* a large chunk's buffer is not kept after a reset; the next one works */
    ob_chunk_reset(&c);
    CHECK(c.buf.sb.data == NULL && c.buf.sb.alloc == 0);
    CHECK_INT(c.n, 0);
    for (uint32_t k = 0; k < 2; k++)
        CHECK_INT(add_rec(&c, k), 0);
    {
        size_t vn = 0;
        const uint8_t *v = ob_chunk_value(&c, &vn);
        check_records(v, vn, 0, 2);
    }
    ob_chunk_free(&c);
}

/* A value written before chunks: [kind, version, key, h, proj|nil]. */
static void test_single_record(void)
{
    mp_buf b;
    ob_reader r;
    ob_rec rec;
    uint32_t cnt = 0;

    mp_buf_init(&b);
    mp_put_array(&b, 5);
    mp_put_u64(&b, 1);
    mp_put_u64(&b, 4242);
    mp_put_bin(&b, "key", 3);
    mp_put_u64(&b, 99);
    mp_put_nil(&b);
    CHECK(!b.oom);
    CHECK_INT(ob_reader_open(&r, (const uint8_t *)b.sb.data, b.sb.size, 31, &cnt), 0);
    CHECK_INT(cnt, 1);
    CHECK_INT(ob_reader_next(&r, &rec), 0);
    CHECK_INT(rec.seq, 31);
    CHECK_INT(rec.kind, 1);
    CHECK_INT(rec.version, 4242);
    CHECK_INT(rec.h, 99);
    CHECK(rec.key.n == 3 && memcmp(rec.key.p, "key", 3) == 0);
    CHECK_INT(ob_reader_next(&r, &rec), SX_ENOTFOUND);
    mp_buf_free(&b);
}

static void test_malformed(void)
{
    static const uint8_t empty_chunk[5] = { 0xdd, 0, 0, 0, 0 };
    static const uint8_t too_many[5] = { 0xdd, 0, 0, 0, 9 }; /* 9 records, no bytes */
    ob_chunk c;
    ob_reader r;
    ob_rec rec;
    uint32_t cnt = 1;
    const uint8_t *v;
    size_t vn = 0;

    CHECK_INT(ob_reader_open(&r, empty_chunk, sizeof(empty_chunk), 1, &cnt), SX_EIO);
    CHECK_INT(cnt, 0);
    CHECK_INT(ob_reader_open(&r, too_many, sizeof(too_many), 1, &cnt), SX_EIO);
    CHECK_INT(ob_value_count(too_many, sizeof(too_many)), 0);
    /* neither a chunk nor a record; a record of the older format cut short */
    CHECK_INT(ob_reader_open(&r, (const uint8_t *)"\x93\x01\x02\x03", 4, 1, &cnt), SX_EIO);
    CHECK_INT(ob_reader_open(&r, NULL, 0, 1, &cnt), SX_EIO);
    CHECK_INT(ob_value_count(NULL, 0), 0);
    CHECK_INT(ob_reader_open(&r, (const uint8_t *)"\x95\x01\x02", 3, 1, &cnt), 0);
    CHECK_INT(ob_reader_next(&r, &rec), SX_EIO);
    /* a chunk cut short: its last record is an error, not a short read */
    ob_chunk_init(&c);
    for (uint32_t i = 0; i < 4; i++)
        CHECK_INT(add_rec(&c, i), 0);
    v = ob_chunk_value(&c, &vn);
    CHECK_INT(ob_reader_open(&r, v, vn - 3, 16, &cnt), 0);
    CHECK_INT(cnt, 4);
    for (int i = 0; i < 3; i++)
        CHECK_INT(ob_reader_next(&r, &rec), 0);
    CHECK_INT(ob_reader_next(&r, &rec), SX_EIO);
    ob_chunk_free(&c);
}

int main(void)
{
    test_roundtrip_and_reuse();
    test_caps();
    test_single_record();
    test_malformed();
    return CHECK_DONE();
}
