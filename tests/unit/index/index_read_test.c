/*
 * index_read_test.c — I_RANGE on an index partition (node/index/index_read.c):
 * the live entries of one index in [lo, hi) — hi empty: to the end of lo's
 * index, not into the next one — in key order, ascending or descending, at
 * most `limit` of them; a deleted entry (its tombstone) is left out; the
 * reply carries the partition's watermark of every source.
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

/* One I_RANGE over [lo, hi) (names; hi NULL: open; lo NULL: the start of
 * index 7); the names of the keys returned, space-separated, into got. */
static int range(ix_part *p, const char *lo, const char *hi, bool desc, uint64_t limit, char *got,
                 size_t gn, uint64_t *wm1)
{
    msg_I_RANGE_req q;
    msg_I_RANGE_rep r;
    tup_bytes lk = { 0 }, hk = { 0 };
    mp_buf out;
    char msg[200] = "";
    size_t used = 0;
    int rc;

    if (lo != NULL)
        ixf_local_key(&lk, lo);
    else
        CHECK(tup_bytes_append(&lk, "\0\0\0\7", 4) == 0);
    if (hi != NULL)
        ixf_local_key(&hk, hi);
    memset(&q, 0, sizeof(q));
    q.part = IXF_PART;
    q.lo = (mp_span){ lk.p, lk.n };
    q.hi = (mp_span){ hk.p, hk.n };
    q.desc = desc;
    q.limit = limit;
    mp_buf_init(&out);
    ix_part_range(p, &q, &out);
    memset(&r, 0, sizeof(r));
    rc = msg_decode_rep(MSG_I_RANGE, (const uint8_t *)out.sb.data, out.sb.size, &r, msg,
                        sizeof(msg));
    got[0] = '\0';
    if (rc == 0) {
        CHECK(r.hashes.n == r.keys.n && r.versions.n == r.keys.n && r.projs.n == r.keys.n);
        for (uint32_t i = 0; i < r.keys.n; i++) {
            mp_buf name;
            mp_cur c;
            mp_span s = { NULL, 0 };

            /* the key is index id | tup(name): decode the name back */
            mp_buf_init(&name);
            CHECK(r.keys.v[i].n > 4 &&
                  tup_decode_to_mp(r.keys.v[i].p + 4, r.keys.v[i].n - 4, &name) > 0);
            c = mp_cur_make((const uint8_t *)name.sb.data, name.sb.size);
            CHECK(mp_read_str(&c, &s) == 0);
            used += (size_t)snprintf(got + used, used < gn ? gn - used : 0, "%s%.*s", i ? " " : "",
                                     (int)s.n, s.p ? (const char *)s.p : "");
            mp_buf_free(&name);
        }
        *wm1 = 0;
        for (uint32_t i = 0; i < r.sources.n && i < r.wms.n; i++)
            if (r.sources.v[i] == 1)
                *wm1 = r.wms.v[i];
    } else {
        fprintf(stderr, "I_RANGE: %s: %s\n", sx_strerror(rc), msg);
    }
    msg_free_rep(MSG_I_RANGE, &r);
    mp_buf_free(&out);
    tup_bytes_free(&lk);
    tup_bytes_free(&hk);
    return rc;
}

/* Checks one range read returns exactly want. */
static void expect(ix_part *p, const char *lo, const char *hi, bool desc, uint64_t limit,
                   const char *want)
{
    char got[256];
    uint64_t wm1 = 0;

    CHECK(range(p, lo, hi, desc, limit, got, sizeof(got), &wm1) == 0);
    CHECKF(strcmp(got, want) == 0, "[%s, %s) %s limit %llu: got '%s', want '%s'", lo ? lo : "start",
           hi ? hi : "end", desc ? "desc" : "asc", (unsigned long long)limit, got, want);
    CHECK(wm1 == 7);
}

static bool run(const char *dir)
{
    static const uint64_t PUT = OUT_PUT, DEL = OUT_DEL;
    const uint64_t puts[3] = { PUT, PUT, PUT };
    cfg_cluster *cfg = NULL;
    ix_part *p = NULL;
    ixf_req r;

    if (!ixf_open(dir, "ixread", 2, &cfg, &p))
        return false;

    /* index 7: k1 .. k5, then k3 deleted; index 8: x1 */
    ixf_req_make(&r, 1, 3, (const uint64_t[]){ 1, 2, 3 }, puts, (const uint64_t[]){ 10, 20, 30 },
                 (const char *const[]){ "k1", "k2", "k3" }, 3, 0, 0);
    CHECK(ixf_apply(p, &r, false) == 0);
    ixf_req_make(&r, 1, 3, (const uint64_t[]){ 4, 5, 6 }, puts, (const uint64_t[]){ 40, 50, 60 },
                 (const char *const[]){ "k4", "k5", "x1" }, 6, 0, 3);
    CHECK(ixf_apply(p, &r, false) == 0);
    ixf_req_make(&r, 1, 1, (const uint64_t[]){ 7 }, &DEL, (const uint64_t[]){ 70 },
                 (const char *const[]){ "k3" }, 7, 0, 6);
    CHECK(ixf_apply(p, &r, false) == 0);

    expect(p, NULL, NULL, false, 0, "k1 k2 k4 k5");
    expect(p, NULL, NULL, true, 0, "k5 k4 k2 k1");
    expect(p, NULL, NULL, false, 2, "k1 k2");
    expect(p, NULL, NULL, true, 2, "k5 k4");
    expect(p, "k2", "k5", false, 0, "k2 k4");
    expect(p, "k2", "k5", true, 0, "k4 k2");
    expect(p, "k3", NULL, true, 1, "k5");

    CHECK(ix_part_close(p));
    cfg_free(cfg);
    return true;
}

int main(int argc, char **argv)
{
    return scratch_run(argc, argv, "sx-ixread", run) ? CHECK_DONE() : 1;
}
