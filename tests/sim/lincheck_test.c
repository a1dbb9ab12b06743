/*
 * lincheck_test.c — the linearizability checker judged on hand-made register
 * histories whose answer is known, including timed-out puts (return at +inf)
 * and a history large enough to need the memoisation.
 */
#include <stdio.h>
#include <string.h>

#include "sim.h"

#include "check.h" /* tests/unit: CHECK, check_failures */

static sim_hop P(uint64_t v, uint64_t call, uint64_t ret)
{
    sim_hop h;
    memset(&h, 0, sizeof h);
    h.kind = OP_PUT;
    h.in = v;
    h.call = call;
    h.ret = ret;
    return h;
}

static sim_hop G(uint64_t v, uint64_t call, uint64_t ret)
{
    sim_hop h;
    memset(&h, 0, sizeof h);
    h.kind = OP_GET;
    h.out = v;
    h.call = call;
    h.ret = ret;
    return h;
}

int main(void)
{
    /* empty and trivial */
    CHECK(lincheck_register(NULL, 0) == 1);
    sim_hop a[] = { G(0, 1, 2) };
    CHECK(lincheck_register(a, 1) == 1);
    sim_hop b[] = { G(5, 1, 2) }; /* reads a value never written */
    CHECK(lincheck_register(b, 1) == 0);
    /* concurrent put and get: either order */
    sim_hop c[] = { P(1, 0, 10), G(1, 5, 15), G(0, 2, 8) };
    CHECK(lincheck_register(c, 3) == 1);
    /* stale read: get starts after the put returned, yet sees the old value */
    sim_hop d[] = { P(1, 0, 10), G(0, 11, 12) };
    CHECK(lincheck_register(d, 2) == 0);
    /* a read going back in time */
    sim_hop e[] = { P(1, 0, 5), P(2, 6, 10), G(2, 11, 12), G(1, 13, 14) };
    CHECK(lincheck_register(e, 4) == 0);
    /* timed-out put: may take effect any time after its call, or never */
    sim_hop f[] = { P(7, 0, SIM_INF), G(0, 5, 6), G(7, 20, 21) };
    CHECK(lincheck_register(f, 3) == 1);
    sim_hop f2[] = { P(7, 0, SIM_INF), G(0, 5, 6) };
    CHECK(lincheck_register(f2, 2) == 1);
    /* ... but not before its call */
    sim_hop g[] = { G(7, 1, 2), P(7, 5, SIM_INF) };
    CHECK(lincheck_register(g, 2) == 0);
    /* and once seen it stays (no other writer) */
    sim_hop h[] = { P(7, 0, SIM_INF), G(7, 5, 6), G(0, 8, 9) };
    CHECK(lincheck_register(h, 3) == 0);
    /* touching intervals count as concurrent */
    sim_hop i[] = { P(1, 0, 10), G(0, 10, 11) };
    CHECK(lincheck_register(i, 2) == 1);
    /* many concurrent puts then reads that pin one order: needs the cache */
    sim_hop big[64];
    int n = 0;
    for (int k = 1; k <= 14; k++)
        big[n++] = P((uint64_t)k, 0, 100);
    for (int k = 20; k <= 40; k++)
        big[n++] = P((uint64_t)k, 0, SIM_INF); /* unread */
    big[n++] = G(7, 101, 102);
    big[n++] = G(7, 103, 104);
    CHECK(lincheck_register(big, (size_t)n) == 1);
    big[n++] = G(3, 105, 106); /* nobody wrote 3 after 7 */
    CHECK(lincheck_register(big, (size_t)n) == 0);
    n--;
    big[n++] = G(30, 105, 106); /* a timed-out put may land late */
    CHECK(lincheck_register(big, (size_t)n) == 1);
    big[n++] = G(7, 107, 108); /* ... but 7 cannot come back */
    CHECK(lincheck_register(big, (size_t)n) == 0);
    if (check_failures) {
        fprintf(stderr, "%d check(s) failed\n", check_failures);
        return 1;
    }
    printf("all lincheck tests passed\n");
    return 0;
}
