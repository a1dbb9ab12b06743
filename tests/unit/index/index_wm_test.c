/*
 * index_wm_test.c — an index partition's watermark per source moves only
 * contiguously (node/index/index_apply.c): an I_APPLY whose `after` is past
 * the watermark, even by one (after = wm + 1: a record the partition never
 * got, lost before its sync), is refused whole (SX_EUNAVAIL, "out of order")
 * and applies and moves nothing; one at the watermark applies; a late
 * I_APPLY with an older upto (a duplicate of a round already applied) leaves
 * the watermark where it is; records at or below the watermark are dropped
 * as redeliveries even when the version rule would take them (a key never
 * stored, a newer version), also when their request's after is below them.
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

/* Applies r (answered once synced): returns its error and, in *wm, the
 * watermark its answer reports. */
static int apply_wm(ix_part *p, ixf_req *r, uint64_t *wm)
{
    uint64_t synced = 0;
    char err[300] = "";
    int rc = ix_part_apply(p, &r->m, false, wm, &synced, err, sizeof(err));

    if (rc == SX_EUNAVAIL)
        CHECK(strstr(err, "out of order") != NULL);
    ixf_req_free(r);
    return rc;
}

/* Source 1's published watermark. */
static uint64_t published(ix_part *p)
{
    uint64_t wm[4] = { 0 }, hw[4] = { 0 };
    int s = ix_part_src_index(p, 1);

    CHECK(s >= 0 && s < 4 && p->nsrc <= 4);
    ix_part_state(p, NULL, NULL, wm, hw);
    return s >= 0 && s < 4 ? wm[s] : 0;
}

static bool run(const char *dir)
{
    static const uint64_t PUT = OUT_PUT;
    const uint64_t puts[3] = { PUT, PUT, PUT };
    cfg_cluster *cfg = NULL;
    ix_part *p = NULL;
    uint64_t entries = 0, wm = 0, ver = 0;
    ixf_req r;

    if (!ixf_open(dir, "ixwm", 2, &cfg, &p))
        return false;

    /* seqs 1, 2 (keys a1, a2 at versions 10, 20): watermark 2 */
    ixf_req_make(&r, 1, 2, (const uint64_t[]){ 1, 2 }, puts, (const uint64_t[]){ 10, 20 },
                 (const char *const[]){ "a1", "a2" }, 2, 0, 0);
    CHECK(apply_wm(p, &r, &wm) == 0 && wm == 2);
    CHECK(published(p) == 2);

    /* after 3: seq 3 never arrived; refused, nothing applied or moved */
    ixf_req_make(&r, 1, 1, (const uint64_t[]){ 4 }, puts, (const uint64_t[]){ 40 },
                 (const char *const[]){ "a4" }, 4, 0, 3);
    CHECK(apply_wm(p, &r, &wm) == SX_EUNAVAIL);
    CHECK(published(p) == 2);
    CHECK(ixf_stored(p, "a4", NULL) == 0);
    ix_part_state(p, &entries, NULL, NULL, NULL);
    CHECK(entries == 2);

    /* after 2 (at the watermark): seqs 3, 4 apply */
    ixf_req_make(&r, 1, 2, (const uint64_t[]){ 3, 4 }, puts, (const uint64_t[]){ 30, 40 },
                 (const char *const[]){ "a3", "a4" }, 4, 0, 2);
    CHECK(apply_wm(p, &r, &wm) == 0 && wm == 4);
    CHECK(published(p) == 4);
    CHECK(ixf_stored(p, "a3", &ver) == 1 && ver == 30);

    /* a late copy of the round of seq 3 (upto 3): the watermark stays 4 */
    ixf_req_make(&r, 1, 1, (const uint64_t[]){ 3 }, puts, (const uint64_t[]){ 30 },
                 (const char *const[]){ "a3" }, 3, 0, 2);
    CHECK(apply_wm(p, &r, &wm) == 0 && wm == 4);
    CHECK(published(p) == 4);
    if (published(p) != 4)
        fprintf(stderr, "a late I_APPLY with upto 3 moved the watermark from 4 to %llu\n",
                (unsigned long long)published(p));

    /* records at or below the watermark are redeliveries, whatever their
     * version or key: seq 2 with a key never stored, seq 3 with a newer
     * version of a3; after 1 is below both */
    ixf_req_make(&r, 1, 2, (const uint64_t[]){ 2, 3 }, puts, (const uint64_t[]){ 99, 98 },
                 (const char *const[]){ "z2", "a3" }, 4, 0, 1);
    CHECK(apply_wm(p, &r, &wm) == 0 && wm == 4);
    CHECK(ixf_stored(p, "z2", NULL) == 0);
    CHECK(ixf_stored(p, "a3", &ver) == 1 && ver == 30);
    ix_part_state(p, &entries, NULL, NULL, NULL);
    CHECK(entries == 4);

    /* and the stream goes on after 4 */
    ixf_req_make(&r, 1, 1, (const uint64_t[]){ 5 }, puts, (const uint64_t[]){ 50 },
                 (const char *const[]){ "a5" }, 5, 0, 4);
    CHECK(apply_wm(p, &r, &wm) == 0 && wm == 5);
    CHECK(published(p) == 5 && ixf_stored(p, "a5", NULL) == 1);

    CHECK(ix_part_close(p));
    cfg_free(cfg);
    return true;
}

int main(int argc, char **argv)
{
    return scratch_run(argc, argv, "sx-ixwm", run) ? CHECK_DONE() : 1;
}
