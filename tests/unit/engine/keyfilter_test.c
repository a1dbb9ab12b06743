/*
 * keyfilter_test.c — unit test of node/engine/keyfilter.c, the absent-key filter
 * of storage nodes (fact keys) and index partitions (entry keys): it never
 * calls an added key absent (a committer would then skip reading what
 * exists), it says nothing before it is ready, it grows by segments without
 * losing keys, its false positives stay rare, it counts the reads it
 * spares, past its byte cap it turns itself off (every answer "maybe"),
 * and so does kf_disable; its hash tells apart keys that differ in one
 * byte, in length or in partition, and the hashed forms (kf_key_of, then
 * kf_add_key and kf_absent_key) agree with the plain ones.
 * (node/engine/keyfilter_load.c, the scan that fills it while writers add keys,
 * is keyfilter_load_test.c.)
 * Standalone (no leveldb, no nng): main() returns non-zero on any failure.
 */
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include "check.h"
#include "keyfilter.h"

/* Key i as a fact key would look: 'F', a table id, then 8 bytes of i. */
static size_t key_of(uint64_t i, uint8_t *k)
{
    k[0] = 'F';
    k[1] = 0;
    k[2] = 0;
    k[3] = 0;
    k[4] = 7;
    for (int b = 0; b < 8; b++)
        k[5 + b] = (uint8_t)(i >> (56 - 8 * b));
    return 13;
}

/* Adds keys [from, to) of partition part. */
static void add_range(keyfilter *f, uint64_t part, uint64_t from, uint64_t to)
{
    uint8_t k[16];

    for (uint64_t i = from; i < to; i++)
        kf_add(f, part, k, key_of(i, k));
}

/* How many of keys [from, to) of part the filter calls absent. */
static uint64_t count_absent(keyfilter *f, uint64_t part, uint64_t from, uint64_t to)
{
    uint8_t k[16];
    uint64_t n = 0;

    for (uint64_t i = from; i < to; i++)
        n += kf_absent(f, part, k, key_of(i, k));
    return n;
}

static void test_not_ready(void)
{
    keyfilter *f = NULL;
    bool ready = true, on = false;

    CHECK(kf_create(0, 1u << 20, &f) == 0 && f != NULL);
    if (f == NULL)
        return;
    add_range(f, 1, 0, 1000);
    /* not ready: nothing is certainly absent, not even a key never added */
    CHECK_INT(count_absent(f, 1, 1000, 11000), 0);
    kf_stats(f, NULL, NULL, NULL, &ready, &on);
    CHECK(!ready && on);
    kf_set_ready(f);
    CHECK_INT(count_absent(f, 1, 0, 1000), 0);
    uint64_t absent = count_absent(f, 1, 1000, 11000), spared = 0;
    CHECK(absent > 9500);
    kf_stats(f, NULL, &spared, NULL, NULL, NULL);
    CHECK_INT(spared, absent); /* every "absent" is a read spared */
    kf_disable(f);
    kf_stats(f, NULL, NULL, NULL, &ready, &on);
    CHECK(!on);
    CHECK_INT(count_absent(f, 1, 1000, 11000), 0);
    kf_destroy(f);
}

static void test_growth(void)
{
    keyfilter *f = NULL;
    uint64_t keys = 0;
    size_t bytes0 = 0, bytes1 = 0;
    bool on = false;

    /* expect 0: the first segment holds 65,536 keys; 600,000 need four */
    CHECK(kf_create(0, 64u << 20, &f) == 0 && f != NULL);
    if (f == NULL)
        return;
    kf_stats(f, NULL, NULL, &bytes0, NULL, NULL);
    kf_set_ready(f);
    add_range(f, 1, 0, 300000);
    add_range(f, 2, 0, 300000); /* the same local keys, another partition */
    kf_stats(f, &keys, NULL, &bytes1, NULL, &on);
    CHECK_INT(keys, 600000);
    CHECK(on && bytes1 > bytes0);
    CHECK_INT(count_absent(f, 1, 0, 300000), 0);
    CHECK_INT(count_absent(f, 2, 0, 300000), 0);
    /* absent keys: the segments are checked in turn, so the false
     * positives add up over them; still most are called absent */
    uint64_t absent = count_absent(f, 1, 300000, 400000) + count_absent(f, 3, 0, 100000);
    printf("growth: %zu bytes for %llu keys, %llu of 200000 absent keys called absent\n", bytes1,
           (unsigned long long)keys, (unsigned long long)absent);
    CHECK(absent > 180000);
    kf_destroy(f);
}

static void test_sized(void)
{
    keyfilter *f = NULL;
    size_t bytes0 = 0, bytes1 = 0;

    /* sized by the store's item count: one segment holds them all */
    CHECK(kf_create(400000, 64u << 20, &f) == 0 && f != NULL);
    if (f == NULL)
        return;
    kf_stats(f, NULL, NULL, &bytes0, NULL, NULL);
    add_range(f, 9, 0, 400000);
    kf_set_ready(f);
    kf_stats(f, NULL, NULL, &bytes1, NULL, NULL);
    CHECK_INT(bytes1, bytes0);
    CHECK_INT(count_absent(f, 9, 0, 400000), 0);
    uint64_t absent = count_absent(f, 9, 400000, 500000);
    printf("sized: %zu bytes, %llu of 100000 absent keys called absent\n", bytes1,
           (unsigned long long)absent);
    CHECK(absent > 97000); /* ~7 bits a key: ~1 % false positives */
    kf_destroy(f);
}

static void test_cap(void)
{
    keyfilter *f = NULL;
    size_t bytes = 1;
    bool on = true;

    /* 200 KiB: the first segment (80 KiB) and the second (160 KiB) do not
     * both fit, so the filter turns off when the first is full */
    CHECK(kf_create(0, 200u << 10, &f) == 0 && f != NULL);
    if (f == NULL)
        return;
    kf_set_ready(f);
    add_range(f, 1, 0, 65536);
    CHECK(count_absent(f, 1, 100000, 110000) > 9000);
    add_range(f, 1, 65536, 70000);
    kf_stats(f, NULL, NULL, &bytes, NULL, &on);
    CHECK(!on);
    CHECK_INT(bytes, 0);
    CHECK_INT(count_absent(f, 1, 0, 200000), 0);
    add_range(f, 1, 70000, 80000); /* adds to an off filter are ignored */
    CHECK_INT(count_absent(f, 1, 0, 200000), 0);
    kf_destroy(f);

    /* a cap below the smallest segment: off from the start */
    CHECK(kf_create(1000, 1024, &f) == 0 && f != NULL);
    if (f == NULL)
        return;
    kf_set_ready(f);
    kf_stats(f, NULL, NULL, NULL, NULL, &on);
    CHECK(!on);
    CHECK_INT(count_absent(f, 1, 0, 1000), 0);
    kf_destroy(f);
    kf_destroy(NULL);
}

/* Keys of 0..40 bytes (every word boundary and tail length), each varied
 * in one byte, extended by a zero byte, or moved to another partition:
 * no two of them may share a hash (a hash that skipped the length, the
 * tail or the partition would collide here). */
static void test_hash(void)
{
    enum { MAXN = 40, PER = 2 * MAXN + 4 };
    static kf_key seen[(MAXN + 1) * PER];
    size_t n = 0, dup = 0;
    uint8_t k[MAXN + 1];

    for (size_t len = 0; len <= MAXN; len++) {
        memset(k, 'x', sizeof(k));
        seen[n++] = kf_key_of(1, k, len);
        seen[n++] = kf_key_of(2, k, len);
        for (size_t i = 0; i < len; i++) {
            k[i] = 'y';
            seen[n++] = kf_key_of(1, k, len);
            k[i] = 'x';
        }
    }
    for (size_t len = 0; len < MAXN; len++) { /* 'x'... then a zero byte */
        memset(k, 'x', sizeof(k));
        k[len] = 0;
        seen[n++] = kf_key_of(1, k, len + 1);
    }
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            dup += seen[i].a == seen[j].a || seen[i].b == seen[j].b;
    CHECK_INT(dup, 0);

    /* the hashed forms are the plain ones */
    keyfilter *f = NULL;
    uint8_t key[16];

    CHECK(kf_create(0, 1u << 20, &f) == 0 && f != NULL);
    if (f == NULL)
        return;
    kf_set_ready(f);
    for (uint64_t i = 0; i < 1000; i++)
        kf_add_key(f, kf_key_of(5, key, key_of(i, key)));
    CHECK_INT(count_absent(f, 5, 0, 1000), 0);
    uint64_t absent = 0;
    for (uint64_t i = 1000; i < 2000; i++)
        absent += kf_absent_key(f, kf_key_of(5, key, key_of(i, key)));
    CHECK_INT(absent, count_absent(f, 5, 1000, 2000));
    CHECK(absent > 950);
    kf_destroy(f);
}

int main(void)
{
    test_hash();
    test_not_ready();
    test_growth();
    test_sized();
    test_cap();
    return CHECK_DONE();
}
