/*
 * bf_sort_test.c — unit test of node/storage/bf_sort.c (a backfill's sorted run of
 * index records) and node/engine/u64set.c (the set of facts written during a
 * backfill):
 *   - records read back whole (fact key, version, hash, entry key,
 *     projection or none) after the sort, in entry-key order with a shorter
 *     key first, ties broken by hash and then fact key; 20,000 records in
 *     a pseudo-random order (keys of 1 to 39 bytes, sharing long prefixes)
 *     come out ordered, each exactly once; so do 300,000 with
 *     pseudo-random keys of 4 to 44 bytes, many equal;
 *   - the run's size grows with what it holds and a cleared run is reused;
 *   - the set holds what was added (0 included) and nothing else, across
 *     its growth, and a lost set answers "present" to everything; a
 *     bounded set is lost (its table freed) by the value past its bound.
 * Standalone (no leveldb, no nng): main() returns non-zero on any failure.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bf_sort.h"
#include "check.h"
#include "sx_errors.h"
#include "u64set.h"

static int cmp_bytes(const uint8_t *a, size_t an, const uint8_t *b, size_t bn)
{
    int c = memcmp(a, b, an < bn ? an : bn);

    return c ? c : (an < bn ? -1 : an > bn);
}

static void test_small(void)
{
    bf_recs r;
    bf_rec x;
    const uint8_t p[] = { 0x81, 0xa1, 'a', 0x01 };

    bf_recs_init(&r);
    CHECK_INT(bf_recs_bytes(&r), 0);
    /* "abc" twice (h 9 then h 3), "ab" (a prefix: first), "b" */
    CHECK_INT(
        bf_recs_add(&r, (const uint8_t *)"f1", 2, 11, 9, (const uint8_t *)"abc", 3, p, sizeof(p)),
        0);
    CHECK_INT(bf_recs_add(&r, (const uint8_t *)"f2", 2, 12, 3, (const uint8_t *)"abc", 3, NULL, 0),
              0);
    CHECK_INT(bf_recs_add(&r, (const uint8_t *)"f3x", 3, 13, 5, (const uint8_t *)"ab", 2, NULL, 0),
              0);
    CHECK_INT(bf_recs_add(&r, (const uint8_t *)"f4", 2, 14, 1, (const uint8_t *)"b", 1, p, 2), 0);
    CHECK(bf_recs_bytes(&r) > 3 * 4);
    bf_recs_sort(&r);
    CHECK_INT(r.n, 4);
    bf_recs_get(&r, 0, &x);
    CHECK(x.kn == 2 && memcmp(x.key, "ab", 2) == 0 && x.version == 13 && x.h == 5);
    CHECK(x.fkn == 3 && memcmp(x.fkey, "f3x", 3) == 0 && x.pn == 0 && x.proj == NULL);
    bf_recs_get(&r, 1, &x);
    CHECK(x.kn == 3 && x.h == 3 && x.version == 12 && memcmp(x.fkey, "f2", 2) == 0);
    bf_recs_get(&r, 2, &x);
    CHECK(x.kn == 3 && x.h == 9 && x.version == 11 && x.pn == sizeof(p) &&
          memcmp(x.proj, p, sizeof(p)) == 0);
    bf_recs_get(&r, 3, &x);
    CHECK(x.kn == 1 && x.key[0] == 'b' && x.pn == 2 && memcmp(x.proj, p, 2) == 0);
    bf_recs_clear(&r);
    CHECK_INT(r.n, 0);
    CHECK_INT(bf_recs_bytes(&r), 0);
    CHECK_INT(bf_recs_add(&r, (const uint8_t *)"g", 1, 1, 1, (const uint8_t *)"z", 1, NULL, 0), 0);
    bf_recs_sort(&r);
    bf_recs_get(&r, 0, &x);
    CHECK(x.kn == 1 && x.key[0] == 'z' && x.fkey[0] == 'g');
    bf_recs_free(&r);
}

/* Checks that r (sorted) is in entry-key, hash, fact-key order and holds
 * each of n records, numbered by a 4-byte fact key 0..n-1, exactly once. */
static void check_order(const bf_recs *r, uint32_t n)
{
    uint8_t *seen = calloc(n, 1);
    bf_rec prev = { 0 }, x;
    size_t ordered = 0, all = 0;

    CHECK(seen != NULL);
    if (seen == NULL)
        return;
    CHECK_INT(r->n, n);
    for (size_t i = 0; i < r->n; i++) {
        uint32_t j;
        int c;

        bf_recs_get(r, i, &x);
        memcpy(&j, x.fkey, 4);
        if (x.fkn == 4 && j < n && !seen[j]) {
            seen[j] = 1;
            all++;
        }
        if (i > 0) {
            c = cmp_bytes(prev.key, prev.kn, x.key, x.kn);
            if (c < 0 ||
                (c == 0 && (prev.h < x.h ||
                            (prev.h == x.h && cmp_bytes(prev.fkey, prev.fkn, x.fkey, x.fkn) < 0))))
                ordered++;
        }
        prev = x;
    }
    CHECK_INT(ordered, n - 1);
    CHECK_INT(all, n);
    free(seen);
}

/* 20,000 records with keys of 1..39 bytes sharing long prefixes (so the
 * sort's 24-byte prefix often ties), added in a scrambled order. */
static void test_many(void)
{
    enum { N = 20000 };
    bf_recs r;
    bf_rec x;
    size_t wrong = 0;

    bf_recs_init(&r);
    for (uint32_t i = 0; i < N; i++) {
        uint32_t j = (i * 7919u) % N; /* 7919 is prime: a permutation */
        uint8_t key[40], fkey[4];
        size_t kn = 1 + j % 39; /* past 24 bytes too: the sort's prefix */

        memset(key, 'k', sizeof(key));
        key[kn - 1] = (uint8_t)(j % 251);
        memcpy(fkey, &j, 4);
        CHECK_INT(bf_recs_add(&r, fkey, 4, j, (uint64_t)(j % 13), key, kn, key, kn % 5), 0);
    }
    bf_recs_sort(&r);
    check_order(&r, N);
    for (size_t i = 0; i < r.n; i++) { /* each record read back whole */
        uint32_t j;

        bf_recs_get(&r, i, &x);
        memcpy(&j, x.fkey, 4);
        if (x.version != j || x.h != j % 13 || x.kn != 1 + j % 39 || x.pn != x.kn % 5 ||
            x.key[x.kn - 1] != (uint8_t)(j % 251))
            wrong++;
    }
    CHECK_INT(wrong, 0);
    bf_recs_free(&r);
}

/* 300,000 records with pseudo-random keys as an index makes them: a shared
 * 4-byte index id, then values of 0 to 40 bytes drawn from a small
 * alphabet (many equal keys and long shared prefixes: buckets of every
 * size, the sort's large-bucket path past 24 bytes included), and hashes
 * that tie too. */
static void test_random(void)
{
    enum { N = 300000 };
    bf_recs r;
    uint64_t s = 0x2545f4914f6cdd1dull;

    bf_recs_init(&r);
    for (uint32_t j = 0; j < N; j++) {
        uint8_t key[48] = { 0, 0, 0, 7 };
        size_t kn;

        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        kn = 4 + (size_t)(s % 41);
        for (size_t i = 4; i < kn; i++)
            key[i] = (uint8_t)((s >> (i % 7 * 8)) % (i < 20 ? 3 : 200));
        CHECK_INT(bf_recs_add(&r, (const uint8_t *)&j, 4, j, s >> 60, key, kn, NULL, 0), 0);
    }
    bf_recs_sort(&r);
    check_order(&r, N);
    bf_recs_free(&r);
}

static void test_set(void)
{
    u64set s;
    size_t wrong = 0;

    u64set_init(&s);
    CHECK(!u64set_has(&s, 0));
    CHECK(!u64set_has(&s, 42));
    CHECK_INT(u64set_add(&s, 0), 0);
    CHECK(u64set_has(&s, 0));
    for (uint64_t v = 1; v <= 5000; v++)
        CHECK_INT(u64set_add(&s, v * 0x9e3779b97f4a7c15ull), 0);
    CHECK_INT(u64set_add(&s, 0x9e3779b97f4a7c15ull), 0); /* again: no change */
    CHECK_INT(s.n, 5000);
    for (uint64_t v = 1; v <= 5000; v++)
        wrong += !u64set_has(&s, v * 0x9e3779b97f4a7c15ull);
    for (uint64_t v = 5001; v <= 10000; v++)
        wrong += u64set_has(&s, v * 0x9e3779b97f4a7c15ull);
    CHECK_INT(wrong, 0);
    s.lost = true;
    CHECK(u64set_has(&s, 123456789));
    CHECK_INT(u64set_add(&s, 7), 0);
    u64set_free(&s);
    CHECK(!u64set_has(&s, 0x9e3779b97f4a7c15ull));
    CHECK(!s.lost);

    /* bounded: the value past max loses the set (and its table) */
    s.max = 100;
    for (uint64_t v = 1; v <= 100; v++)
        CHECK_INT(u64set_add(&s, v), 0);
    CHECK(!s.lost && u64set_has(&s, 100) && !u64set_has(&s, 101));
    CHECK_INT(u64set_add(&s, 50), 0); /* present: no growth */
    CHECK(!s.lost);
    CHECK_INT(u64set_add(&s, 101), SX_ENOMEM);
    CHECK(s.lost && s.slot == NULL && u64set_has(&s, 999));
    u64set_free(&s);
}

int main(void)
{
    test_small();
    test_many();
    test_random();
    test_set();
    return CHECK_DONE();
}
