/*
 * index_gc_test.c — a deleted entry's tombstone through an index partition's
 * apply path and its collection (node/index/index_apply.c, index_gc.c), with
 * two storage partitions as sources:
 *   - the tombstone blocks an older put that arrives after it (a backfill's
 *     I_BUILD record read before the delete): the entry stays deleted;
 *   - it is collected only once EVERY source has reported a version
 *     high-water (hw_seen) past it, not when one has: then the entry and its
 *     tombstone are gone and the counters say so;
 *   - once it is collected, the put it deleted, shipped again by its source
 *     (a resend from before its watermark), is a redelivery and is dropped:
 *     the version rule can no longer stop it, the watermark must.
 * Links node_index and the index tests' fixture. Argument: a scratch dir
 * (default: a fresh one under $TMPDIR or /tmp, removed afterwards).
 */
#define CHECK_TALLY_SHARED /* fixture.c checks too */
#define CHECK_TALLY_DEFINE
#include <stdio.h>
#include <string.h>
#include "check.h"
#include "fixture.h"
#include "scratch.h"
#include "sx_errors.h"

/* A heartbeat of source: no record, its watermark at upto, hw_seen hw. */
static int heartbeat(ix_part *p, uint64_t source, uint64_t upto, uint64_t hw)
{
    ixf_req r;

    ixf_req_make(&r, source, 0, NULL, NULL, NULL, NULL, upto, hw, upto);
    return ixf_apply(p, &r, false);
}

static void counts(ix_part *p, uint64_t *entries, uint64_t *tombs)
{
    ix_part_state(p, entries, tombs, NULL, NULL);
}

static bool run(const char *dir)
{
    static const uint64_t PUT = OUT_PUT, DEL = OUT_DEL;
    const char *k1[] = { "k1" }, *k1k2[] = { "k1", "k2" };
    cfg_cluster *cfg = NULL;
    ix_part *p = NULL;
    uint64_t entries = 0, tombs = 0, ver = 0, collected = 0;
    ixf_req r;

    if (!ixf_open(dir, "ixgc", 2, &cfg, &p))
        return false;

    /* source 1: put k1 at version 100 and k2 at 110 (seqs 1, 2), then
     * delete k1 at version 200 (seq 3) */
    ixf_req_make(&r, 1, 2, (const uint64_t[]){ 1, 2 }, (const uint64_t[]){ PUT, PUT },
                 (const uint64_t[]){ 100, 110 }, k1k2, 2, 0, 0);
    CHECK(ixf_apply(p, &r, false) == 0);
    ixf_req_make(&r, 1, 1, (const uint64_t[]){ 3 }, &DEL, (const uint64_t[]){ 200 }, k1, 3, 0, 2);
    CHECK(ixf_apply(p, &r, false) == 0);
    CHECK(ixf_stored(p, "k1", &ver) == 2 && ver == 200);
    counts(p, &entries, &tombs);
    CHECK(entries == 1 && tombs == 1);

    /* a backfill record of k1 read before the delete (version 100) comes
     * after it: the tombstone blocks it */
    ixf_req_make(&r, 1, 1, NULL, &PUT, (const uint64_t[]){ 100 }, k1, 3, 0, 0);
    CHECK(ixf_apply(p, &r, true) == 0);
    CHECK(ixf_stored(p, "k1", &ver) == 2 && ver == 200);
    counts(p, &entries, &tombs);
    CHECK(entries == 1 && tombs == 1);

    /* collection: source 1 has seen versions up to 500, source 2 only up
     * to 150: a put of k1 older than 200 could still come: kept */
    CHECK(heartbeat(p, 1, 3, 500) == 0);
    CHECK(heartbeat(p, 2, 0, 150) == 0);
    CHECK(ix_part_gc(p, 10, &collected) == 0);
    CHECK(collected == 0);
    CHECK(ixf_stored(p, "k1", &ver) == 2 && ver == 200);
    counts(p, &entries, &tombs);
    CHECK(tombs == 1);
    if (collected != 0)
        fprintf(stderr, "a tombstone at 200 was collected below source 2's hw_seen 150\n");

    /* every source past 200: collected */
    CHECK(heartbeat(p, 2, 0, 300) == 0);
    CHECK(ix_part_gc(p, 10, &collected) == 0);
    CHECK(collected == 1);
    CHECK(ixf_stored(p, "k1", NULL) == 0);
    counts(p, &entries, &tombs);
    CHECK(entries == 1 && tombs == 0);
    CHECK(ixf_stored(p, "k2", &ver) == 1 && ver == 110); /* a live entry stays */

    /* source 1 sends its records again from the start (after 0): all are
     * at or below its watermark 3, so none applies; k1 stays deleted */
    ixf_req_make(&r, 1, 2, (const uint64_t[]){ 1, 2 }, (const uint64_t[]){ PUT, PUT },
                 (const uint64_t[]){ 100, 110 }, k1k2, 2, 0, 0);
    CHECK(ixf_apply(p, &r, false) == 0);
    CHECK(ixf_stored(p, "k1", NULL) == 0);
    counts(p, &entries, &tombs);
    CHECK(entries == 1 && tombs == 0);
    if (ixf_stored(p, "k1", NULL) != 0)
        fprintf(stderr, "a redelivered put resurrected an entry whose tombstone was "
                        "collected\n");

    CHECK(ix_part_close(p));
    cfg_free(cfg);
    return true;
}

int main(int argc, char **argv)
{
    return scratch_run(argc, argv, "sx-ixgc", run) ? CHECK_DONE() : 1;
}
