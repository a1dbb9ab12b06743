/*
 * index_rules_test.c — unit test of node/index/index_rules.c, the index
 * partition's apply and tombstone-collection rules: newer version wins,
 * a tombstone blocks an older put, redelivered records are ignored,
 * watermarks only advance, tombstones are collectible only below every
 * source's hw_seen, batch sequence checks, key order and partition ranges.
 * Besides the single-rule checks, a tiny in-memory replica of one key
 * applies shuffled record streams and must always converge on the newest.
 * Standalone (no leveldb, no nng): main() returns non-zero on any failure.
 */
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include "check.h"
#include "index_rules.h"

enum { PUT = 0, DEL = 1 };

static void test_decide(void)
{
    /* nothing stored: put and delete both write */
    CHECK(ix_decide(false, 0, PUT, 5) == IX_WRITE_LIVE);
    CHECK(ix_decide(false, 0, DEL, 5) == IX_WRITE_TOMB);
    /* newer wins, equal or older is ignored */
    CHECK(ix_decide(true, 5, PUT, 6) == IX_WRITE_LIVE);
    CHECK(ix_decide(true, 5, PUT, 5) == IX_SKIP);
    CHECK(ix_decide(true, 5, PUT, 4) == IX_SKIP);
    CHECK(ix_decide(true, 5, DEL, 6) == IX_WRITE_TOMB);
    CHECK(ix_decide(true, 5, DEL, 5) == IX_SKIP);
    CHECK(ix_decide(true, 5, DEL, 1) == IX_SKIP);
    /* unknown kinds never write */
    CHECK(ix_decide(false, 0, 2, 9) == IX_SKIP);
    CHECK(ix_decide(true, 1, -1, 9) == IX_SKIP);
    /* stored_version is ignored when nothing is stored */
    CHECK(ix_decide(false, UINT64_MAX, PUT, 1) == IX_WRITE_LIVE);
}

/* One key's stored state, driven only by the rules. */
typedef struct replica {
    bool have, live;
    uint64_t version;
    uint64_t wm;
} replica;

typedef struct rec {
    uint64_t seq;
    int kind;
    uint64_t version;
} rec;

static void apply(replica *r, const rec *x, uint64_t upto)
{
    if (!ix_redelivered(x->seq, r->wm)) {
        ix_action a = ix_decide(r->have, r->version, x->kind, x->version);

        if (a != IX_SKIP) {
            r->have = true;
            r->live = a == IX_WRITE_LIVE;
            r->version = x->version;
        }
    }
    r->wm = ix_advance(r->wm, upto);
}

static void test_tombstone_blocks_older_put(void)
{
    replica r = { false, false, 0, 0 };
    rec del = { 10, DEL, 200 }, late_put = { 11, PUT, 150 }, new_put = { 12, PUT, 250 };

    apply(&r, &del, 10);
    CHECK(r.have && !r.live && r.version == 200);
    apply(&r, &late_put, 11); /* e.g. a backfill put of an old version */
    CHECK(r.have && !r.live && r.version == 200);
    apply(&r, &new_put, 12);
    CHECK(r.have && r.live && r.version == 250);
}

static void test_redelivery_and_watermark(void)
{
    replica r = { false, false, 0, 0 };
    rec put1 = { 1, PUT, 100 }, del2 = { 2, DEL, 101 };

    apply(&r, &put1, 1);
    apply(&r, &del2, 2);
    CHECK(!r.live && r.version == 101 && r.wm == 2);
    /* the whole batch again (the ack was lost): nothing changes */
    apply(&r, &put1, 1);
    apply(&r, &del2, 2);
    CHECK(!r.live && r.version == 101 && r.wm == 2);
    CHECK(ix_redelivered(2, 2));
    CHECK(!ix_redelivered(3, 2));
    CHECK(ix_redelivered(0, 0));
    /* watermarks never go back; a heartbeat moves them forward */
    CHECK(ix_advance(7, 3) == 7);
    CHECK(ix_advance(7, 9) == 9);
    CHECK(ix_advance(0, 0) == 0);
    r.wm = ix_advance(r.wm, 40);
    CHECK(r.wm == 40);
}

/* Every order of a small set of records for one key ends in the state of
 * the newest record (records carry distinct versions). */
static void test_convergence(void)
{
    rec recs[5] = {
        { 1, PUT, 10 }, { 2, DEL, 20 }, { 3, PUT, 30 }, { 4, PUT, 25 }, { 5, DEL, 40 }
    };
    int perm[5] = { 0, 1, 2, 3, 4 };
    int count = 0, bad = 0;

    /* Heap's algorithm, iterative, over all 120 orders */
    int c[5] = { 0 }, i = 0;
    for (;;) {
        replica r = { false, false, 0, 0 };
        int j;

        for (j = 0; j < 5; j++) /* watermarks off: order is the test */
            apply(&r, &recs[perm[j]], 0);
        if (!(r.have && !r.live && r.version == 40))
            bad++;
        count++;
        while (i < 5 && c[i] >= i) {
            c[i] = 0;
            i++;
        }
        if (i >= 5)
            break;
        {
            int a = i % 2 == 0 ? 0 : c[i], t = perm[a];

            perm[a] = perm[i];
            perm[i] = t;
        }
        c[i]++;
        i = 0;
    }
    CHECK(count == 120);
    CHECK(bad == 0);
}

static void test_gc(void)
{
    uint64_t hw[3] = { 500, 300, 900 };
    uint64_t silent[3] = { 500, 0, 900 };

    CHECK(ix_gc_horizon(hw, 3) == 300);
    CHECK(ix_gc_horizon(hw, 0) == 0);
    CHECK(ix_gc_horizon(silent, 3) == 0); /* a source never heard from blocks GC */
    CHECK(ix_gc_collectible(299, 300));
    CHECK(!ix_gc_collectible(300, 300)); /* needs hw_seen > v, strictly */
    CHECK(!ix_gc_collectible(301, 300));
    CHECK(!ix_gc_collectible(0, 0));
    CHECK(!ix_gc_collectible(1, ix_gc_horizon(silent, 3)));
}

static void test_seqs(void)
{
    uint64_t ok[3] = { 4, 5, 9 }, dup[3] = { 4, 4, 9 }, down[2] = { 5, 3 };

    CHECK(ix_seqs_ok(NULL, 0, 0));
    CHECK(ix_seqs_ok(ok, 3, 9));
    CHECK(ix_seqs_ok(ok, 3, 100));
    CHECK(!ix_seqs_ok(ok, 3, 8));
    CHECK(!ix_seqs_ok(dup, 3, 9));
    CHECK(!ix_seqs_ok(down, 2, 9));
}

static void test_keys_and_ranges(void)
{
    const uint8_t a[] = { 0x30, 'A', 0 }, ab[] = { 0x30, 'A', 'b', 0 };
    const uint8_t m[] = { 0x30, 'M', 0 }, z[] = { 0x30, 'z', 0 };

    CHECK(ix_keycmp(a, 3, ab, 4) < 0);
    CHECK(ix_keycmp(ab, 4, a, 3) > 0);
    CHECK(ix_keycmp(a, 3, a, 3) == 0);
    CHECK(ix_keycmp(a, 2, a, 3) < 0); /* prefix sorts first */
    CHECK(ix_keycmp(a, 0, a, 0) == 0);
    /* [lo, hi): lo inclusive, hi exclusive, empty bounds unbounded */
    CHECK(ix_tuple_in_range(m, 3, m, 3, z, 3));
    CHECK(!ix_tuple_in_range(z, 3, m, 3, z, 3));
    CHECK(!ix_tuple_in_range(a, 3, m, 3, z, 3));
    CHECK(ix_tuple_in_range(a, 3, NULL, 0, m, 3));
    CHECK(ix_tuple_in_range(z, 3, m, 3, NULL, 0));
    CHECK(ix_tuple_in_range(a, 3, NULL, 0, NULL, 0));
}

int main(void)
{
    test_decide();
    test_tombstone_blocks_older_put();
    test_redelivery_and_watermark();
    test_convergence();
    test_gc();
    test_seqs();
    test_keys_and_ranges();
    return CHECK_DONE();
}
