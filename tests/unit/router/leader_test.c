/*
 * leader_test.c — the router's leader cache and the walk of a call through
 * a partition's replicas (router/leader.c), on a config built in memory,
 * without sockets or clocks (the times are the test's):
 *   - the cache starts at each partition's first replica and only ever
 *     names one of its replicas; storage and index partitions of several
 *     replicas are walked; a partition of one replica, or one that is not
 *     a partition of the cache's config, is not;
 *   - a success is final and becomes the cached leader;
 *   - SX_ENOTLEADER with a hint naming a replica goes there (and the cache
 *     follows it); a hint naming a node that holds no replica, an unknown
 *     id, or the replying node itself is ignored: the next replica;
 *   - hint 0 cycles through the replicas not yet tried, then pauses
 *     20 ms, 40, 80, 100, 100 between cycles;
 *   - a call never sent (node down, connection dropped or busy) is passed
 *     over, for reads and writes;
 *   - a read that timed out or lost its connection goes on to the next
 *     replica; a write that did is final with an unknown outcome, as is any
 *     other error reply;
 *   - each attempt is bounded: 1 s for a read, 2 s for a write, or what is
 *     left when less; a replica that already left this walk's call
 *     unanswered gets all that is left;
 *   - a replica that left a call unanswered is suspect for its partition
 *     for 2 s: walks start elsewhere, hints naming it count as hint 0, a
 *     cycle skips it; a success there clears it;
 *   - a node that failed a call on the way is suspect for every partition
 *     until it answers, for 2 s; after that it is only avoided as a first
 *     choice, and hints naming it are followed again;
 *   - the give-up message names the partition (storage or index), the time
 *     and the replicas tried; the unknown-outcome message says so.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "leader.h"
#include "sx_errors.h"

/* nodes: 0 r1 (router), 1 s1 (id 1), 2 s2 (id 2), 3 s3 (id 3), 4 s4 (id
 * 4), 5 i1 (index, id 9), 6 i2 (index, id 10). storage[0]: partition 7 on
 * s1, s2, s3; storage[1]: partition 8 on s4 alone. index[0]: partition 101
 * on i1, i2; index[1]: partition 102 on i1 alone. */
enum { R1, S1, S2, S3, S4, I1, I2, NN };
static cfg_node nodes[NN];
static cfg_part storage[2], ixparts[2];
static cfg_cluster cfg;

/* A time well past any mark the previous check left (2 s apart). */
static uint64_t T = 100000;
static uint64_t later(void)
{
    T += 10 * RT_LW_SUSPECT_MS;
    return T;
}

static void make_cfg(void)
{
    static const char *names[] = { "r1", "s1", "s2", "s3", "s4", "i1", "i2" };
    static const int ids[] = { 0, 1, 2, 3, 4, 9, 10 };
    static const int roles[] = { SX_ROLE_ROUTER,  SX_ROLE_STORAGE, SX_ROLE_STORAGE, SX_ROLE_STORAGE,
                                 SX_ROLE_STORAGE, SX_ROLE_INDEX,   SX_ROLE_INDEX };

    for (int i = 0; i < NN; i++)
        nodes[i] = (cfg_node){ .name = (char *)names[i],
                               .id = ids[i],
                               .role = roles[i],
                               .url = (char *)"tcp://127.0.0.1:1",
                               .host = -1 };
    storage[0] = (cfg_part){ .id = 7, .node = S1, .nrep = 3, .rep = { S1, S2, S3 } };
    storage[1] = (cfg_part){ .id = 8, .node = S4, .nrep = 1, .rep = { S4 } };
    ixparts[0] = (cfg_part){ .id = 101, .node = I1, .nrep = 2, .rep = { I1, I2 } };
    ixparts[1] = (cfg_part){ .id = 102, .node = I1, .nrep = 1, .rep = { I1 } };
    memset(&cfg, 0, sizeof(cfg));
    cfg.nnodes = NN;
    cfg.nodes = nodes;
    cfg.nstorage = 2;
    cfg.storage = storage;
    cfg.nindex = 2;
    cfg.index = ixparts;
}

static void cache(void)
{
    rt_leaders lc;
    cfg_part other = storage[0]; /* a copy: not one of cfg's partitions */

    CHECK_RC(rt_leaders_init(&lc, &cfg), 0);
    CHECK(rt_leader_walks(&lc, &storage[0]));
    CHECK(!rt_leader_walks(&lc, &storage[1])); /* one replica */
    CHECK(rt_leader_walks(&lc, &ixparts[0]));  /* an index partition of two */
    CHECK(!rt_leader_walks(&lc, &ixparts[1]));
    CHECK(!rt_leader_walks(&lc, &other));
    CHECK(!rt_leader_walks(&lc, NULL));
    CHECK_INT(rt_leader_get(&lc, &storage[0]), S1);
    CHECK_INT(rt_leader_get(&lc, &storage[1]), S4);
    CHECK_INT(rt_leader_get(&lc, &ixparts[0]), I1);
    CHECK_INT(rt_leader_get(&lc, &ixparts[1]), I1);
    CHECK_INT(rt_leader_get(&lc, NULL), -1);

    rt_leader_note(&lc, &storage[0], S3);
    CHECK_INT(rt_leader_get(&lc, &storage[0]), S3);
    rt_leader_note(&lc, &storage[0], S4); /* s4 holds no replica of 7 */
    CHECK_INT(rt_leader_get(&lc, &storage[0]), S3);
    rt_leader_note(&lc, &storage[0], -1);
    CHECK_INT(rt_leader_get(&lc, &storage[0]), S3);
    rt_leader_note(&lc, &storage[1], S1); /* not walked: stays */
    CHECK_INT(rt_leader_get(&lc, &storage[1]), S4);
    rt_leader_note(&lc, &ixparts[0], S4); /* no replica of 101 */
    CHECK_INT(rt_leader_get(&lc, &ixparts[0]), I1);
    rt_leader_note(&lc, &ixparts[0], I2); /* kept apart from storage[0]'s */
    CHECK_INT(rt_leader_get(&lc, &ixparts[0]), I2);
    CHECK_INT(rt_leader_get(&lc, &storage[0]), S3);

    rt_leaders_free(&lc);
    rt_leaders_free(&lc); /* twice: harmless */
}

static void pauses(void)
{
    CHECK_INT(rt_lw_pause_ms(0), 20);
    CHECK_INT(rt_lw_pause_ms(1), 40);
    CHECK_INT(rt_lw_pause_ms(2), 80);
    CHECK_INT(rt_lw_pause_ms(3), 100);
    CHECK_INT(rt_lw_pause_ms(50), 100);
}

/* A success at the first node, at a hinted one, and the cache after. */
static void success_and_hint(void)
{
    rt_leaders lc;
    rt_lwalk w;

    CHECK_RC(rt_leaders_init(&lc, &cfg), 0);
    rt_lw_start(&w, &lc, &storage[0], false, later());
    CHECK(w.walks);
    CHECK_INT(w.node, S1);
    CHECK_INT(rt_lw_next(&w, 0, 0, RT_LH_ANSWERED, T), RT_LW_DONE);
    CHECK_INT(rt_leader_get(&lc, &storage[0]), S1);

    /* s1 names s3 (id 3): straight there, and the cache follows */
    rt_lw_start(&w, &lc, &storage[0], true, later());
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 3, RT_LH_ANSWERED, T), RT_LW_RETRY);
    CHECK_INT(w.node, S3);
    CHECK_INT(w.pause_ms, 0);
    CHECK_INT(rt_leader_get(&lc, &storage[0]), S3);
    CHECK_INT(rt_lw_next(&w, 0, 0, RT_LH_ANSWERED, T), RT_LW_DONE);
    CHECK_INT(rt_leader_get(&lc, &storage[0]), S3);
    CHECK_INT(w.attempts, 2);

    /* the next call starts at s3 */
    rt_lw_start(&w, &lc, &storage[0], false, later());
    CHECK_INT(w.node, S3);

    /* an index partition: i1 names i2 (id 10) */
    rt_lw_start(&w, &lc, &ixparts[0], false, later());
    CHECK(w.walks);
    CHECK_INT(w.node, I1);
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 10, RT_LH_ANSWERED, T), RT_LW_RETRY);
    CHECK_INT(w.node, I2);
    CHECK_INT(rt_lw_next(&w, 0, 0, RT_LH_ANSWERED, T), RT_LW_DONE);
    CHECK_INT(rt_leader_get(&lc, &ixparts[0]), I2);
    CHECK_INT(rt_leader_get(&lc, &storage[0]), S3);
    rt_leaders_free(&lc);
}

/* Hints that name no usable replica: the next replica instead. */
static void bad_hints(void)
{
    rt_leaders lc;
    rt_lwalk w;

    CHECK_RC(rt_leaders_init(&lc, &cfg), 0);
    rt_lw_start(&w, &lc, &storage[0], false, later());
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 4, RT_LH_ANSWERED, T), RT_LW_RETRY); /* no replica */
    CHECK_INT(w.node, S2);
    CHECK_INT(rt_leader_get(&lc, &storage[0]), S1);                              /* not followed */
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 2, RT_LH_ANSWERED, T), RT_LW_RETRY); /* itself */
    CHECK_INT(w.node, S3);
    CHECK_INT(w.pause_ms, 0);
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 200, RT_LH_ANSWERED, T), RT_LW_RETRY); /* unknown */
    CHECK_INT(w.node, S1);
    CHECK_INT(w.pause_ms, 20);                                                   /* a cycle */
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 9, RT_LH_ANSWERED, T), RT_LW_RETRY); /* i1 */
    CHECK_INT(w.node, S2);
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 1ull << 40, RT_LH_ANSWERED, T), RT_LW_RETRY);
    CHECK_INT(w.node, S3);
    CHECK_INT(rt_leader_get(&lc, &storage[0]), S1);
    rt_leaders_free(&lc);
}

/* An election: every replica answers hint 0; the walk cycles through them
 * in order, pausing longer after each cycle, until one leads. */
static void election(void)
{
    static const int order[] = { S2, S3, S1, S2, S3, S1, S2, S3, S1, S2, S3, S1, S2, S3, S1 };
    static const int pause[] = { 0, 0, 20, 0, 0, 40, 0, 0, 80, 0, 0, 100, 0, 0, 100 };
    rt_leaders lc;
    rt_lwalk w;

    CHECK_RC(rt_leaders_init(&lc, &cfg), 0);
    rt_lw_start(&w, &lc, &storage[0], true, later()); /* a write: ENOTLEADER is safe to resend */
    for (int k = 0; k < 15; k++) {
        CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 0, RT_LH_ANSWERED, T), RT_LW_RETRY);
        CHECK_INT(w.node, order[k]);
        CHECK_INT(w.pause_ms, pause[k]);
    }
    CHECK_INT(w.cycles, 5);
    CHECK_INT(rt_leader_get(&lc, &storage[0]), S1); /* nothing learnt */
    CHECK_INT(rt_lw_next(&w, 0, 0, RT_LH_ANSWERED, T), RT_LW_DONE);
    CHECK_INT(rt_leader_get(&lc, &storage[0]), S1);

    /* after a hint, hint 0 goes to the replica not tried yet in the cycle:
     * s1 -> (hint s3) s3 -> (hint 0) s2, not s1 again */
    rt_lw_start(&w, &lc, &storage[0], false, later());
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 3, RT_LH_ANSWERED, T), RT_LW_RETRY);
    CHECK_INT(w.node, S3);
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 0, RT_LH_ANSWERED, T), RT_LW_RETRY);
    CHECK_INT(w.node, S2);
    CHECK_INT(w.pause_ms, 0);
    CHECK_INT(rt_lw_next(&w, 0, 0, RT_LH_ANSWERED, T), RT_LW_DONE);
    CHECK_INT(rt_leader_get(&lc, &storage[0]), S2);

    /* two stale replicas naming each other: a pause every three attempts */
    rt_lw_start(&w, &lc, &storage[0], false, later()); /* at s2 */
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 3, RT_LH_ANSWERED, T), RT_LW_RETRY);
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 2, RT_LH_ANSWERED, T), RT_LW_RETRY);
    CHECK_INT(w.node, S2);
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 3, RT_LH_ANSWERED, T), RT_LW_RETRY);
    CHECK_INT(w.node, S3);
    CHECK_INT(w.pause_ms, 20);
    rt_leaders_free(&lc);
}

/* Calls never sent, and failures after sending: reads go on, writes stop. */
static void unsent_and_lost(void)
{
    rt_leaders lc;
    rt_lwalk w;

    CHECK_RC(rt_leaders_init(&lc, &cfg), 0);
    /* s1, then s2, never got it (down, or its connection dropped or stayed
     * busy): the next replica, for a write too */
    rt_lw_start(&w, &lc, &storage[0], true, later());
    CHECK_INT(rt_lw_next(&w, SX_EUNAVAIL, 0, RT_LH_UNSENT, T), RT_LW_RETRY);
    CHECK_INT(w.node, S2);
    CHECK_INT(rt_lw_next(&w, SX_ETIMEDOUT, 0, RT_LH_UNSENT, T), RT_LW_RETRY);
    CHECK_INT(w.node, S3);
    CHECK(!rt_lw_unknown_outcome(&w, RT_LH_UNSENT));
    CHECK_INT(rt_lw_next(&w, 0, 0, RT_LH_ANSWERED, T), RT_LW_DONE);
    CHECK_INT(rt_leader_get(&lc, &storage[0]), S3);

    /* a write that timed out or lost its connection at s3: unknown
     * outcome, final; the cache keeps s3 */
    static const int lost[] = { SX_ETIMEDOUT, SX_EUNAVAIL, SX_ENET };
    for (int k = 0; k < 3; k++) {
        rt_lw_start(&w, &lc, &storage[0], true, later());
        CHECK_INT(w.node, S3);
        CHECK_INT(rt_lw_next(&w, lost[k], 0, RT_LH_LOST, T), RT_LW_DONE);
        CHECK(rt_lw_unknown_outcome(&w, RT_LH_LOST));
        CHECK_INT(w.node, S3);
        CHECK_INT(w.attempts, 1);
    }
    /* even after a redirect */
    rt_lw_start(&w, &lc, &storage[0], true, later());
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 1, RT_LH_ANSWERED, T), RT_LW_RETRY);
    CHECK_INT(w.node, S1);
    CHECK_INT(rt_lw_next(&w, SX_ETIMEDOUT, 0, RT_LH_LOST, T), RT_LW_DONE);
    CHECK(rt_lw_unknown_outcome(&w, RT_LH_LOST));

    /* a read that timed out at s1: next replica; not an unknown outcome */
    for (int k = 0; k < 3; k++) {
        rt_leader_note(&lc, &storage[0], S1);
        rt_lw_start(&w, &lc, &storage[0], false, later());
        CHECK_INT(w.node, S1);
        CHECK_INT(rt_lw_next(&w, lost[k], 0, RT_LH_LOST, T), RT_LW_RETRY);
        CHECK_INT(w.node, S2);
        CHECK(!rt_lw_unknown_outcome(&w, RT_LH_LOST));
    }
    /* a node's own "unavailable" or "timed out" reply: reads go on */
    rt_lw_start(&w, &lc, &storage[0], false, later());
    CHECK_INT(rt_lw_next(&w, SX_EUNAVAIL, 0, RT_LH_ANSWERED, T), RT_LW_RETRY);
    rt_lw_start(&w, &lc, &storage[0], true, T);
    CHECK_INT(rt_lw_next(&w, SX_EUNAVAIL, 0, RT_LH_ANSWERED, T), RT_LW_DONE);
    CHECK(!rt_lw_unknown_outcome(&w, RT_LH_ANSWERED));
    /* any other error reply, or a local failure, is final */
    static const int final[] = { SX_ENOTFOUND, SX_ESTALECAT, SX_EDEADLINE, SX_EIO, SX_EPROTO };
    for (int k = 0; k < 5; k++) {
        rt_lw_start(&w, &lc, &storage[0], false, later());
        CHECK_INT(rt_lw_next(&w, final[k], 0, RT_LH_ANSWERED, T), RT_LW_DONE);
        rt_lw_start(&w, &lc, &storage[0], true, T);
        CHECK_INT(rt_lw_next(&w, final[k], 0, RT_LH_ANSWERED, T), RT_LW_DONE);
    }
    rt_lw_start(&w, &lc, &storage[0], false, later());
    CHECK_INT(rt_lw_next(&w, SX_ETOOBIG, 0, RT_LH_LOCAL, T), RT_LW_DONE);
    CHECK_INT(rt_leader_get(&lc, &storage[0]), S1);
    rt_leaders_free(&lc);
}

/* How long each attempt may wait. */
static void attempt_bounds(void)
{
    rt_leaders lc;
    rt_lwalk w;

    CHECK_RC(rt_leaders_init(&lc, &cfg), 0);
    rt_lw_start(&w, &lc, &storage[0], false, later());
    CHECK_INT(rt_lw_attempt_ms(&w, 10000), RT_LW_READ_ATTEMPT_MS);
    CHECK_INT(rt_lw_attempt_ms(&w, 300), 300);
    CHECK_INT(rt_lw_attempt_ms(&w, 0), 1);
    rt_lw_start(&w, &lc, &storage[0], true, T);
    CHECK_INT(rt_lw_attempt_ms(&w, 10000), RT_LW_WRITE_ATTEMPT_MS);
    CHECK_INT(rt_lw_attempt_ms(&w, 1500), 1500);
    CHECK(RT_LW_READ_ATTEMPT_MS == 1000 && RT_LW_WRITE_ATTEMPT_MS == 2000);
    /* not walked: the call's whole time */
    rt_lw_start(&w, &lc, &storage[1], true, T);
    CHECK_INT(rt_lw_attempt_ms(&w, 10000), 10000);
    rt_lw_start(&w, &lc, &ixparts[1], false, T);
    CHECK_INT(rt_lw_attempt_ms(&w, 10000), 10000);
    rt_lw_start(&w, &lc, NULL, false, T);
    CHECK_INT(rt_lw_attempt_ms(&w, 7000), 7000);

    /* a read unanswered at s1 goes round; back at s1 (its suspicion over:
     * no one else leads), it gets all that is left */
    rt_lw_start(&w, &lc, &storage[0], false, later());
    CHECK_INT(rt_lw_next(&w, SX_ETIMEDOUT, 0, RT_LH_LOST, T), RT_LW_RETRY);
    CHECK_INT(w.node, S2);
    CHECK_INT(rt_lw_attempt_ms(&w, 8000), RT_LW_READ_ATTEMPT_MS);
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 1, RT_LH_ANSWERED, T + 100), RT_LW_RETRY);
    CHECK_INT(w.node, S3); /* s1 named, but suspect: as hint 0 */
    T += RT_LW_SUSPECT_MS + 100;
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 1, RT_LH_ANSWERED, T), RT_LW_RETRY);
    CHECK_INT(w.node, S1); /* named again, no longer suspect */
    CHECK_INT(rt_lw_attempt_ms(&w, 6000), 6000);
    CHECK_INT(rt_lw_next(&w, 0, 0, RT_LH_ANSWERED, T), RT_LW_DONE);
    rt_leaders_free(&lc);
}

/* A replica that left a call unanswered is suspect for that partition. */
static void suspect_replica(void)
{
    rt_leaders lc;
    rt_lwalk w;
    uint64_t t0;

    CHECK_RC(rt_leaders_init(&lc, &cfg), 0);
    rt_leader_note(&lc, &storage[0], S2);
    /* a write unanswered at the leader s2: final, and s2 suspect for 7 */
    t0 = later();
    rt_lw_start(&w, &lc, &storage[0], true, t0);
    CHECK_INT(w.node, S2);
    CHECK_INT(rt_lw_next(&w, SX_ETIMEDOUT, 0, RT_LH_LOST, t0 + 2000), RT_LW_DONE);
    CHECK(rt_leader_suspect(&lc, &storage[0], S2, t0 + 2000));
    CHECK(!rt_leader_suspect(&lc, &storage[0], S1, t0 + 2000));
    CHECK(!rt_leader_suspect(&lc, NULL, S2, t0 + 2000)); /* the node: not by this */
    CHECK(!rt_leader_unanswered(&lc, S2));

    /* the next write starts at s3 (after s2); s3 and s1 still name s2
     * (the election is not over): hint 0, and a pause once both said so */
    rt_lw_start(&w, &lc, &storage[0], true, t0 + 2100);
    CHECK_INT(w.node, S3);
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 2, RT_LH_ANSWERED, t0 + 2101), RT_LW_RETRY);
    CHECK_INT(w.node, S1);
    CHECK_INT(w.pause_ms, 0);
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 2, RT_LH_ANSWERED, t0 + 2102), RT_LW_RETRY);
    CHECK_INT(w.node, S3); /* s2 skipped: the cycle closes early */
    CHECK_INT(w.pause_ms, 20);
    CHECK_INT(rt_leader_get(&lc, &storage[0]), S2); /* the hint was not followed */
    /* s3 won the election: it serves, and leads from now on */
    CHECK_INT(rt_lw_next(&w, 0, 0, RT_LH_ANSWERED, t0 + 2500), RT_LW_DONE);
    CHECK_INT(rt_leader_get(&lc, &storage[0]), S3);
    CHECK(w.attempts == 3 && w.write);

    /* 2 s after the failure, s2 is trusted again: a hint to it followed */
    rt_lw_start(&w, &lc, &storage[0], false, t0 + 4100);
    CHECK_INT(w.node, S3);
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 2, RT_LH_ANSWERED, t0 + 4100), RT_LW_RETRY);
    CHECK_INT(w.node, S2);
    /* and a success at s2 clears an earlier mark at once */
    t0 = later();
    rt_lw_start(&w, &lc, &storage[0], false, t0);
    CHECK_INT(w.node, S2);
    CHECK_INT(rt_lw_next(&w, SX_ETIMEDOUT, 0, RT_LH_LOST, t0), RT_LW_RETRY);
    CHECK(rt_leader_suspect(&lc, &storage[0], S2, t0 + 10));
    rt_lw_start(&w, &lc, &storage[0], false, t0 + 10);
    CHECK_INT(w.node, S3); /* the cache names s2, suspect: s3 first */
    w.node = S2;           /* (as if a hint of another walk led there) */
    CHECK_INT(rt_lw_next(&w, 0, 0, RT_LH_ANSWERED, t0 + 20), RT_LW_DONE);
    CHECK(!rt_leader_suspect(&lc, &storage[0], S2, t0 + 30));

    /* a mark on partition 7 leaves index partition 101 alone */
    rt_leader_note(&lc, &ixparts[0], I1);
    rt_lw_start(&w, &lc, &ixparts[0], false, later());
    CHECK_INT(rt_lw_next(&w, SX_ETIMEDOUT, 0, RT_LH_LOST, T), RT_LW_RETRY);
    CHECK_INT(w.node, I2);
    CHECK(rt_leader_suspect(&lc, &ixparts[0], I1, T));
    CHECK(!rt_leader_suspect(&lc, &storage[0], S1, T));
    rt_leaders_free(&lc);
}

/* A node that failed calls on the way and answers nothing (paused, cut
 * off, dead) is suspect for every partition it holds. */
static void suspect_node(void)
{
    rt_leaders lc;
    rt_lwalk w;
    uint64_t t0 = later();

    CHECK_RC(rt_leaders_init(&lc, &cfg), 0);
    rt_leader_seen(&lc, S1, RT_LH_ANSWERED, t0);
    rt_leader_seen(&lc, S1, RT_LH_LOST, t0 + 1000); /* another partition's call */
    CHECK(rt_leader_unanswered(&lc, S1));
    CHECK(rt_leader_suspect(&lc, &storage[0], S1, t0 + 1000));
    CHECK(rt_leader_suspect(&lc, NULL, S1, t0 + 2999));
    CHECK(!rt_leader_suspect(&lc, NULL, S1, t0 + 3000));
    CHECK(!rt_leader_suspect(&lc, &storage[0], S2, t0 + 1000));

    /* the cache still names s1: the walk starts at s2; a hint naming s1
     * counts as 0 */
    rt_lw_start(&w, &lc, &storage[0], true, t0 + 1500);
    CHECK_INT(w.node, S2);
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 1, RT_LH_ANSWERED, t0 + 1500), RT_LW_RETRY);
    CHECK_INT(w.node, S3);
    /* past the suspicion, s1 is still avoided first, but named, followed */
    rt_lw_start(&w, &lc, &storage[0], true, t0 + 3500);
    CHECK_INT(w.node, S2);
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 1, RT_LH_ANSWERED, t0 + 3500), RT_LW_RETRY);
    CHECK_INT(w.node, S1);
    /* an answer from s1 ends it all */
    rt_leader_seen(&lc, S1, RT_LH_ANSWERED, t0 + 3600);
    CHECK(!rt_leader_unanswered(&lc, S1));
    rt_lw_start(&w, &lc, &storage[0], true, t0 + 3700);
    CHECK_INT(w.node, S1);

    /* a local failure says nothing of the node */
    rt_leader_seen(&lc, S1, RT_LH_LOCAL, t0 + 3800);
    CHECK(!rt_leader_unanswered(&lc, S1));
    rt_leader_seen(&lc, -1, RT_LH_LOST, t0); /* out of range: ignored */
    rt_leader_seen(&lc, NN, RT_LH_LOST, t0);

    /* every replica suspect: the walk still goes round them */
    t0 = later();
    for (int k = 0; k < 3; k++)
        rt_leader_seen(&lc, storage[0].rep[k], RT_LH_UNSENT, t0);
    rt_leader_note(&lc, &storage[0], S1);
    rt_lw_start(&w, &lc, &storage[0], false, t0 + 10);
    CHECK_INT(w.node, S1);
    CHECK_INT(rt_lw_next(&w, SX_EUNAVAIL, 0, RT_LH_UNSENT, t0 + 10), RT_LW_RETRY);
    CHECK_INT(w.node, S2);
    CHECK_INT(w.pause_ms, 20);
    CHECK_INT(rt_lw_next(&w, SX_EUNAVAIL, 0, RT_LH_UNSENT, t0 + 40), RT_LW_RETRY);
    CHECK_INT(w.node, S3);
    CHECK_INT(w.pause_ms, 40);

    /* one replica unanswered but no longer suspect, one suspect: the
     * fresh one first, the unanswered one next, the suspect one never in
     * a cycle */
    t0 = later();
    for (int k = 0; k < 3; k++)
        rt_leader_seen(&lc, storage[0].rep[k], RT_LH_ANSWERED, t0);
    rt_leader_seen(&lc, S2, RT_LH_LOST, t0 + 1);
    rt_leader_seen(&lc, S3, RT_LH_LOST, t0 + 3000);
    rt_leader_note(&lc, &storage[0], S3);
    rt_lw_start(&w, &lc, &storage[0], false, t0 + 3100);
    CHECK_INT(w.node, S1);
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 0, RT_LH_ANSWERED, t0 + 3100), RT_LW_RETRY);
    CHECK_INT(w.node, S2);
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 0, RT_LH_ANSWERED, t0 + 3100), RT_LW_RETRY);
    CHECK_INT(w.node, S1);
    CHECK_INT(w.pause_ms, 20);
    rt_leaders_free(&lc);
}

/* A partition of one replica: every result is final, as before. */
static void single(void)
{
    rt_leaders lc;
    rt_lwalk w;

    CHECK_RC(rt_leaders_init(&lc, &cfg), 0);
    rt_lw_start(&w, &lc, &storage[1], false, later());
    CHECK(!w.walks);
    CHECK_INT(w.node, S4);
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 1, RT_LH_ANSWERED, T), RT_LW_DONE);
    rt_lw_start(&w, &lc, &storage[1], true, T);
    CHECK_INT(rt_lw_next(&w, SX_EUNAVAIL, 0, RT_LH_UNSENT, T), RT_LW_DONE);
    rt_lw_start(&w, &lc, &storage[1], false, T);
    CHECK_INT(rt_lw_next(&w, SX_ETIMEDOUT, 0, RT_LH_LOST, T), RT_LW_DONE);
    CHECK_INT(w.node, S4);
    rt_lw_start(&w, &lc, &storage[1], true, T);
    CHECK_INT(rt_lw_next(&w, SX_ETIMEDOUT, 0, RT_LH_LOST, T), RT_LW_DONE);
    CHECK(!rt_lw_unknown_outcome(&w, RT_LH_LOST)); /* reported as it always was */
    /* even when its node is suspect */
    rt_leader_seen(&lc, S4, RT_LH_LOST, T);
    rt_lw_start(&w, &lc, &storage[1], false, T);
    CHECK_INT(w.node, S4);
    rt_lw_start(&w, &lc, &ixparts[1], false, T); /* an index partition of one */
    CHECK(!w.walks);
    CHECK_INT(w.node, I1);
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 10, RT_LH_ANSWERED, T), RT_LW_DONE);
    rt_lw_start(&w, &lc, NULL, false, T); /* a call addressed to a node */
    CHECK(!w.walks);
    CHECK_INT(rt_lw_next(&w, SX_EUNAVAIL, 0, RT_LH_UNSENT, T), RT_LW_DONE);
    rt_leader_note(&lc, NULL, S1);
    rt_leaders_free(&lc);
}

static void messages(void)
{
    rt_leaders lc;
    rt_lwalk w;
    char msg[256];

    CHECK_RC(rt_leaders_init(&lc, &cfg), 0);
    rt_lw_start(&w, &lc, &storage[0], false, later());
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 0, RT_LH_ANSWERED, T), RT_LW_RETRY);
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 0, RT_LH_ANSWERED, T), RT_LW_RETRY);
    CHECK_INT(
        rt_lw_giveup(&w, SX_ENOTLEADER, "storage node s2: not the leader", 1500, msg, sizeof(msg)),
        SX_ENOTLEADER);
    CHECKF(strcmp(msg, "storage partition 7: no leader answered within 1500 ms (tried s1, s2; "
                       "last: storage node s2: not the leader)") == 0,
           "%s", msg);
    CHECK_INT(rt_lw_next(&w, SX_EUNAVAIL, 0, RT_LH_UNSENT, T), RT_LW_RETRY);
    CHECK_INT(rt_lw_giveup(&w, SX_EUNAVAIL, "not connected", 20, msg, sizeof(msg)), SX_EUNAVAIL);
    CHECKF(strstr(msg, "(tried s1, s2, s3; last: not connected)") != NULL, "%s", msg);
    /* a short buffer: cut, terminated */
    char small[16];
    rt_lw_giveup(&w, SX_EUNAVAIL, "x", 20, small, sizeof(small));
    CHECK(strlen(small) == sizeof(small) - 1);

    /* an index partition says so */
    rt_lw_start(&w, &lc, &ixparts[0], false, later());
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 0, RT_LH_ANSWERED, T), RT_LW_RETRY);
    CHECK_INT(
        rt_lw_giveup(&w, SX_ENOTLEADER, "index node i1: not the leader", 900, msg, sizeof(msg)),
        SX_ENOTLEADER);
    CHECKF(strcmp(msg, "index partition 101: no leader answered within 900 ms (tried i1; "
                       "last: index node i1: not the leader)") == 0,
           "%s", msg);

    rt_lw_unknown(SX_ETIMEDOUT, 2000, msg, sizeof(msg));
    CHECKF(strcmp(msg, "no answer within 2000 ms: outcome unknown (may or may not be applied)") ==
               0,
           "%s", msg);
    rt_lw_unknown(SX_EUNAVAIL, 30, msg, sizeof(msg));
    CHECKF(strstr(msg, "connection dropped") != NULL && strstr(msg, "outcome unknown") != NULL,
           "%s", msg);
    rt_leaders_free(&lc);
}

int main(void)
{
    make_cfg();
    cache();
    pauses();
    success_and_hint();
    bad_hints();
    election();
    unsent_and_lost();
    attempt_bounds();
    suspect_replica();
    suspect_node();
    single();
    messages();
    return CHECK_DONE();
}
