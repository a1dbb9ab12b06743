/*
 * index_rules.c — pure apply / collection rules of an index partition.
 * See index_rules.h. Deliberately free of leveldb, nng and msgpack.
 *
 * Built with -DSHARDEX_TEST_HOOKS=ON only, the chaos harness's planted bug
 * "index-ignores-version" (tests/chaos/README.md, "Planted bugs"): with
 * SHARDEX_PLANT=index-ignores-version in the node's environment, ix_decide
 * orders versions backwards: a record older than the stored entry is
 * applied over it, and a newer one is dropped. (Applying every record
 * whatever its version would go unseen: each source's records arrive in
 * seq order and redeliveries are dropped by the watermark, so the newest
 * record of a key is always applied last.) Never reachable from a config
 * file; absent from other builds.
 */
#include <string.h>
#include "index_rules.h"

#ifdef SHARDEX_TEST_HOOKS
#include "plant.h"
#define plant_ignores_version() plant_on("index-ignores-version")
#else
#define plant_ignores_version() false
#endif

/* Mirrors OUT_PUT / OUT_DEL of proto/wire/msg.h without including it, so this
 * file stays dependency-free; index_apply.c checks they agree. */
#define IX_OUT_PUT 0
#define IX_OUT_DEL 1

ix_action ix_decide(bool have, uint64_t stored_version, int rec_kind, uint64_t rec_version)
{
    if (rec_kind != IX_OUT_PUT && rec_kind != IX_OUT_DEL)
        return IX_SKIP;
    if (have && plant_ignores_version()) /* planted: versions compared backwards */
        return rec_version < stored_version
                   ? (rec_kind == IX_OUT_PUT ? IX_WRITE_LIVE : IX_WRITE_TOMB)
                   : IX_SKIP;
    if (have && rec_version <= stored_version)
        return IX_SKIP;
    return rec_kind == IX_OUT_PUT ? IX_WRITE_LIVE : IX_WRITE_TOMB;
}

bool ix_redelivered(uint64_t seq, uint64_t wm)
{
    return seq <= wm;
}

uint64_t ix_advance(uint64_t old, uint64_t reported)
{
    return reported > old ? reported : old;
}

uint64_t ix_gc_horizon(const uint64_t *hw_seen, int n)
{
    uint64_t m;
    int i;

    if (n <= 0)
        return 0;
    m = hw_seen[0];
    for (i = 1; i < n; i++)
        if (hw_seen[i] < m)
            m = hw_seen[i];
    return m;
}

bool ix_gc_collectible(uint64_t v, uint64_t horizon)
{
    return v < horizon;
}

bool ix_seqs_ok(const uint64_t *seqs, uint32_t n, uint64_t upto)
{
    uint32_t i;

    for (i = 1; i < n; i++)
        if (seqs[i] <= seqs[i - 1])
            return false;
    return n == 0 || seqs[n - 1] <= upto;
}

int ix_keycmp(const uint8_t *a, size_t an, const uint8_t *b, size_t bn)
{
    size_t m = an < bn ? an : bn;
    int c = m ? memcmp(a, b, m) : 0;

    if (c != 0)
        return c;
    return an < bn ? -1 : an > bn ? 1 : 0;
}

bool ix_tuple_in_range(const uint8_t *t, size_t tn, const uint8_t *lo, size_t lo_n,
                       const uint8_t *hi, size_t hi_n)
{
    if (lo_n > 0 && ix_keycmp(t, tn, lo, lo_n) < 0)
        return false;
    if (hi_n > 0 && ix_keycmp(t, tn, hi, hi_n) >= 0)
        return false;
    return true;
}
