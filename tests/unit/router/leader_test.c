/*
 * leader_test.c — the router's leader cache and the walk of a call through
 * a storage partition's replicas (router/leader.c), on a config built in
 * memory, without sockets:
 *   - the cache starts at each partition's first replica and only ever
 *     names one of its replicas; a partition of one replica, or one that is
 *     not a storage partition of the cache's config, is never walked;
 *   - a success is final and becomes the cached leader;
 *   - SX_ENOTLEADER with a hint naming a replica goes there (and the cache
 *     follows it); a hint naming a node that holds no replica, an unknown
 *     id, or the replying node itself is ignored: the next replica;
 *   - hint 0 cycles through the replicas not yet tried, then pauses
 *     20 ms, 40, 80, 100, 100 between cycles;
 *   - a node down (nothing sent) is passed over, for reads and writes;
 *   - a read that timed out or lost its connection goes on to the next
 *     replica; a write that did is final, as is any other error reply;
 *   - the give-up message names the partition, the time and the replicas
 *     tried.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "leader.h"
#include "sx_errors.h"

/* nodes: 0 r1 (router), 1 s1 (id 1), 2 s2 (id 2), 3 s3 (id 3), 4 s4 (id
 * 4), 5 i1 (index, id 9). storage[0]: partition 7 on s1, s2, s3;
 * storage[1]: partition 8 on s4 alone. index[0]: partition 101 on i1. */
static cfg_node nodes[6];
static cfg_part storage[2], ixparts[1];
static cfg_cluster cfg;

static void make_cfg(void)
{
    static const char *names[] = { "r1", "s1", "s2", "s3", "s4", "i1" };
    static const int ids[] = { 0, 1, 2, 3, 4, 9 };
    static const int roles[] = { SX_ROLE_ROUTER,  SX_ROLE_STORAGE, SX_ROLE_STORAGE,
                                 SX_ROLE_STORAGE, SX_ROLE_STORAGE, SX_ROLE_INDEX };

    for (int i = 0; i < 6; i++)
        nodes[i] = (cfg_node){ .name = (char *)names[i],
                               .id = ids[i],
                               .role = roles[i],
                               .url = (char *)"tcp://127.0.0.1:1",
                               .host = -1 };
    storage[0] = (cfg_part){ .id = 7, .node = 1, .nrep = 3, .rep = { 1, 2, 3 } };
    storage[1] = (cfg_part){ .id = 8, .node = 4, .nrep = 1, .rep = { 4 } };
    ixparts[0] = (cfg_part){ .id = 101, .node = 5, .nrep = 2, .rep = { 5, 4 } };
    memset(&cfg, 0, sizeof(cfg));
    cfg.nnodes = 6;
    cfg.nodes = nodes;
    cfg.nstorage = 2;
    cfg.storage = storage;
    cfg.nindex = 1;
    cfg.index = ixparts;
}

static void cache(void)
{
    rt_leaders lc;
    cfg_part other = storage[0]; /* a copy: not one of cfg's partitions */

    CHECK_RC(rt_leaders_init(&lc, &cfg), 0);
    CHECK(rt_leader_walks(&lc, &storage[0]));
    CHECK(!rt_leader_walks(&lc, &storage[1])); /* one replica */
    CHECK(!rt_leader_walks(&lc, &ixparts[0])); /* not a storage partition */
    CHECK(!rt_leader_walks(&lc, &other));
    CHECK(!rt_leader_walks(&lc, NULL));
    CHECK_INT(rt_leader_get(&lc, &storage[0]), 1);
    CHECK_INT(rt_leader_get(&lc, &storage[1]), 4);
    CHECK_INT(rt_leader_get(&lc, &ixparts[0]), 5);
    CHECK_INT(rt_leader_get(&lc, NULL), -1);

    rt_leader_note(&lc, &storage[0], 3);
    CHECK_INT(rt_leader_get(&lc, &storage[0]), 3);
    rt_leader_note(&lc, &storage[0], 4); /* s4 holds no replica of 7 */
    CHECK_INT(rt_leader_get(&lc, &storage[0]), 3);
    rt_leader_note(&lc, &storage[0], -1);
    CHECK_INT(rt_leader_get(&lc, &storage[0]), 3);
    rt_leader_note(&lc, &storage[1], 1); /* not walked: stays */
    CHECK_INT(rt_leader_get(&lc, &storage[1]), 4);
    rt_leader_note(&lc, &ixparts[0], 4);
    CHECK_INT(rt_leader_get(&lc, &ixparts[0]), 5);

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
    rt_lw_start(&w, &lc, &storage[0], false);
    CHECK(w.walks);
    CHECK_INT(w.node, 1);
    CHECK_INT(rt_lw_next(&w, 0, 0, false), RT_LW_DONE);
    CHECK_INT(rt_leader_get(&lc, &storage[0]), 1);

    /* s1 names s3 (id 3): straight there, and the cache follows */
    rt_lw_start(&w, &lc, &storage[0], true);
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 3, false), RT_LW_RETRY);
    CHECK_INT(w.node, 3);
    CHECK_INT(w.pause_ms, 0);
    CHECK_INT(rt_leader_get(&lc, &storage[0]), 3);
    CHECK_INT(rt_lw_next(&w, 0, 0, false), RT_LW_DONE);
    CHECK_INT(rt_leader_get(&lc, &storage[0]), 3);
    CHECK_INT(w.attempts, 2);

    /* the next call starts at s3 */
    rt_lw_start(&w, &lc, &storage[0], false);
    CHECK_INT(w.node, 3);
    rt_leaders_free(&lc);
}

/* Hints that name no usable replica: the next replica instead. */
static void bad_hints(void)
{
    rt_leaders lc;
    rt_lwalk w;

    CHECK_RC(rt_leaders_init(&lc, &cfg), 0);
    rt_lw_start(&w, &lc, &storage[0], false);
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 4, false), RT_LW_RETRY); /* s4: no replica */
    CHECK_INT(w.node, 2);
    CHECK_INT(rt_leader_get(&lc, &storage[0]), 1);                   /* not followed */
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 2, false), RT_LW_RETRY); /* itself */
    CHECK_INT(w.node, 3);
    CHECK_INT(w.pause_ms, 0);
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 200, false), RT_LW_RETRY); /* unknown id */
    CHECK_INT(w.node, 1);
    CHECK_INT(w.pause_ms, 20);                                       /* three attempts: a cycle */
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 9, false), RT_LW_RETRY); /* i1: not storage */
    CHECK_INT(w.node, 2);
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 1ull << 40, false), RT_LW_RETRY); /* absurd */
    CHECK_INT(w.node, 3);
    CHECK_INT(rt_leader_get(&lc, &storage[0]), 1);
    rt_leaders_free(&lc);
}

/* An election: every replica answers hint 0; the walk cycles through them
 * in order, pausing longer after each cycle, until one leads. */
static void election(void)
{
    static const int order[] = { 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1 };
    static const int pause[] = { 0, 0, 20, 0, 0, 40, 0, 0, 80, 0, 0, 100, 0, 0, 100 };
    rt_leaders lc;
    rt_lwalk w;

    CHECK_RC(rt_leaders_init(&lc, &cfg), 0);
    rt_lw_start(&w, &lc, &storage[0], true); /* a write: ENOTLEADER is safe to resend */
    for (int k = 0; k < 15; k++) {
        CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 0, false), RT_LW_RETRY);
        CHECK_INT(w.node, order[k]);
        CHECK_INT(w.pause_ms, pause[k]);
    }
    CHECK_INT(w.cycles, 5);
    CHECK_INT(rt_leader_get(&lc, &storage[0]), 1); /* nothing learnt */
    CHECK_INT(rt_lw_next(&w, 0, 0, false), RT_LW_DONE);
    CHECK_INT(rt_leader_get(&lc, &storage[0]), 1);

    /* after a hint, hint 0 goes to the replica not tried yet in the cycle:
     * s1 -> (hint s3) s3 -> (hint 0) s2, not s1 again */
    rt_leader_note(&lc, &storage[0], 1);
    rt_lw_start(&w, &lc, &storage[0], false);
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 3, false), RT_LW_RETRY);
    CHECK_INT(w.node, 3);
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 0, false), RT_LW_RETRY);
    CHECK_INT(w.node, 2);
    CHECK_INT(w.pause_ms, 0);
    CHECK_INT(rt_lw_next(&w, 0, 0, false), RT_LW_DONE);
    CHECK_INT(rt_leader_get(&lc, &storage[0]), 2);

    /* two stale replicas naming each other: a pause every three attempts */
    rt_lw_start(&w, &lc, &storage[0], false); /* at s2 */
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 3, false), RT_LW_RETRY);
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 2, false), RT_LW_RETRY);
    CHECK_INT(w.node, 2);
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 3, false), RT_LW_RETRY);
    CHECK_INT(w.node, 3);
    CHECK_INT(w.pause_ms, 20);
    rt_leaders_free(&lc);
}

/* Nodes down, and failures after sending: reads go on, writes stop. */
static void down_and_timeouts(void)
{
    rt_leaders lc;
    rt_lwalk w;

    CHECK_RC(rt_leaders_init(&lc, &cfg), 0);
    /* s1 down (nothing sent): next replica, for a write too */
    rt_lw_start(&w, &lc, &storage[0], true);
    CHECK_INT(rt_lw_next(&w, SX_EUNAVAIL, 0, true), RT_LW_RETRY);
    CHECK_INT(w.node, 2);
    CHECK_INT(rt_lw_next(&w, SX_EUNAVAIL, 0, true), RT_LW_RETRY);
    CHECK_INT(w.node, 3);
    CHECK_INT(rt_lw_next(&w, 0, 0, false), RT_LW_DONE);
    CHECK_INT(rt_leader_get(&lc, &storage[0]), 3);

    /* a write that timed out, lost its connection, or failed on the way
     * at s3: unknown outcome, final; the cache keeps s3 */
    static const int lost[] = { SX_ETIMEDOUT, SX_EUNAVAIL, SX_ENET };
    for (int k = 0; k < 3; k++) {
        rt_lw_start(&w, &lc, &storage[0], true);
        CHECK_INT(rt_lw_next(&w, lost[k], 0, false), RT_LW_DONE);
        CHECK_INT(w.node, 3);
        CHECK_INT(w.attempts, 1);
    }
    /* even after a redirect */
    rt_lw_start(&w, &lc, &storage[0], true);
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 1, false), RT_LW_RETRY);
    CHECK_INT(w.node, 1);
    CHECK_INT(rt_lw_next(&w, SX_ETIMEDOUT, 0, false), RT_LW_DONE);

    /* a read that timed out at s1: next replica */
    rt_leader_note(&lc, &storage[0], 1);
    for (int k = 0; k < 3; k++) {
        rt_lw_start(&w, &lc, &storage[0], false);
        CHECK_INT(rt_lw_next(&w, lost[k], 0, false), RT_LW_RETRY);
        CHECK_INT(w.node, 2);
    }
    /* any other error reply is final, for reads and writes */
    static const int final[] = { SX_ENOTFOUND, SX_ESTALECAT, SX_EDEADLINE, SX_EIO, SX_EPROTO };
    for (int k = 0; k < 5; k++) {
        rt_lw_start(&w, &lc, &storage[0], false);
        CHECK_INT(rt_lw_next(&w, final[k], 0, false), RT_LW_DONE);
        rt_lw_start(&w, &lc, &storage[0], true);
        CHECK_INT(rt_lw_next(&w, final[k], 0, false), RT_LW_DONE);
    }
    CHECK_INT(rt_leader_get(&lc, &storage[0]), 1);
    rt_leaders_free(&lc);
}

/* A partition of one replica: every result is final, as before. */
static void single(void)
{
    rt_leaders lc;
    rt_lwalk w;

    CHECK_RC(rt_leaders_init(&lc, &cfg), 0);
    rt_lw_start(&w, &lc, &storage[1], false);
    CHECK(!w.walks);
    CHECK_INT(w.node, 4);
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 1, false), RT_LW_DONE);
    rt_lw_start(&w, &lc, &storage[1], true);
    CHECK_INT(rt_lw_next(&w, SX_EUNAVAIL, 0, true), RT_LW_DONE);
    rt_lw_start(&w, &lc, &storage[1], false);
    CHECK_INT(rt_lw_next(&w, SX_ETIMEDOUT, 0, false), RT_LW_DONE);
    CHECK_INT(w.node, 4);
    rt_lw_start(&w, &lc, &ixparts[0], false); /* not a storage partition */
    CHECK(!w.walks);
    CHECK_INT(w.node, 5);
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 4, false), RT_LW_DONE);
    rt_lw_start(&w, &lc, NULL, false); /* a call addressed to a node */
    CHECK(!w.walks);
    CHECK_INT(rt_lw_next(&w, SX_EUNAVAIL, 0, true), RT_LW_DONE);
    rt_leader_note(&lc, NULL, 1);
    rt_leaders_free(&lc);
}

static void giveup(void)
{
    rt_leaders lc;
    rt_lwalk w;
    char msg[256];

    CHECK_RC(rt_leaders_init(&lc, &cfg), 0);
    rt_lw_start(&w, &lc, &storage[0], false);
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 0, false), RT_LW_RETRY);
    CHECK_INT(rt_lw_next(&w, SX_ENOTLEADER, 0, false), RT_LW_RETRY);
    CHECK_INT(
        rt_lw_giveup(&w, SX_ENOTLEADER, "storage node s2: not the leader", 1500, msg, sizeof(msg)),
        SX_ENOTLEADER);
    CHECKF(strcmp(msg, "storage partition 7: no leader answered within 1500 ms (tried s1, s2; "
                       "last: storage node s2: not the leader)") == 0,
           "%s", msg);
    CHECK_INT(rt_lw_next(&w, SX_EUNAVAIL, 0, true), RT_LW_RETRY);
    CHECK_INT(rt_lw_giveup(&w, SX_EUNAVAIL, "not connected", 20, msg, sizeof(msg)), SX_EUNAVAIL);
    CHECKF(strstr(msg, "(tried s1, s2, s3; last: not connected)") != NULL, "%s", msg);
    /* a short buffer: cut, terminated */
    char small[16];
    rt_lw_giveup(&w, SX_EUNAVAIL, "x", 20, small, sizeof(small));
    CHECK(strlen(small) == sizeof(small) - 1);
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
    down_and_timeouts();
    single();
    giveup();
    return CHECK_DONE();
}
