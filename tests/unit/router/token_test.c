/*
 * token_test.c — continuation tokens (router/token.c): a sealed token
 * opens to the same positions; flipping any single byte, truncating,
 * extending, another key, or another query (table, index, direction,
 * bounds, kind) is rejected with SX_ETOKEN.
 */
#include <stdlib.h>
#include <string.h>
#include <sodium.h>

#include "check.h"
#include "token.h"
#include "sx_errors.h"

static uint8_t key[RT_TOKEN_KEYBYTES];

static rt_tokctx ctx_make(void)
{
    rt_tokctx c;

    memset(&c, 0, sizeof(c));
    c.kind = RT_TOK_QUERY;
    c.table_id = 3;
    c.index_id = 9;
    c.desc = 0;
    c.lo = (mp_span){ (const uint8_t *)"\x30Redmond\x00", 9 };
    c.hi = (mp_span){ (const uint8_t *)"\x30Redmond\x01", 9 };
    return c;
}

static bool opens(const uint8_t *k, const rt_tokctx *c, const uint8_t *t, size_t n)
{
    mp_span *pos = NULL;
    uint32_t np = 0;
    int rc = rt_token_open(k, c, t, n, &pos, &np);

    free(pos);
    return rc == 0;
}

static void round_trip(void)
{
    rt_tokctx c = ctx_make();
    mp_span in[3] = { { (const uint8_t *)"abc", 3 },
                      { NULL, 0 },
                      { (const uint8_t *)"\x00\xff\x00", 3 } };
    mp_span *pos = NULL;
    uint32_t np = 0;
    uint8_t *t = NULL;
    size_t n = 0;

    CHECK(rt_token_seal(key, &c, in, 3, &t, &n) == 0);
    CHECK(rt_token_open(key, &c, t, n, &pos, &np) == 0);
    CHECK(np == 3);
    CHECK(pos != NULL && pos[0].n == 3 && memcmp(pos[0].p, "abc", 3) == 0);
    CHECK(pos != NULL && pos[1].n == 0);
    CHECK(pos != NULL && pos[2].n == 3 && memcmp(pos[2].p, "\x00\xff\x00", 3) == 0);
    free(pos);
    free(t);
}

static void tamper(void)
{
    rt_tokctx c = ctx_make(), o;
    mp_span in = { (const uint8_t *)"\x30Redmond\x00\x10\x80\x00\x00\x00\x00\x00\x00\x07", 18 };
    uint8_t *t = NULL, *u;
    uint8_t other[RT_TOKEN_KEYBYTES];
    size_t n = 0, i;
    int bad = 0;

    CHECK(rt_token_seal(key, &c, &in, 1, &t, &n) == 0);
    CHECK(opens(key, &c, t, n));
    u = malloc(n + 1);
    CHECK(u != NULL);
    if (u == NULL)
        return;
    /* every single-byte change is caught */
    for (i = 0; i < n; i++) {
        memcpy(u, t, n);
        u[i] ^= 0x01;
        bad += opens(key, &c, u, n);
    }
    CHECK(bad == 0);
    CHECK(!opens(key, &c, t, n - 1));
    memcpy(u, t, n);
    u[n] = 0;
    CHECK(!opens(key, &c, u, n + 1));
    CHECK(!opens(key, &c, t, 0));
    CHECK(!opens(key, &c, t, 32));
    /* another key, another query */
    memcpy(other, key, sizeof(other));
    other[0] ^= 0x80;
    CHECK(!opens(other, &c, t, n));
    o = c;
    o.table_id = 4;
    CHECK(!opens(key, &o, t, n));
    o = c;
    o.index_id = 0;
    CHECK(!opens(key, &o, t, n));
    o = c;
    o.desc = 1;
    CHECK(!opens(key, &o, t, n));
    o = c;
    o.kind = RT_TOK_SCAN;
    CHECK(!opens(key, &o, t, n));
    o = c;
    o.lo.n = 8;
    CHECK(!opens(key, &o, t, n));
    o = c;
    o.hi = (mp_span){ NULL, 0 };
    CHECK(!opens(key, &o, t, n));
    /* a forged token without the key */
    {
        uint8_t forged[64];
        memset(forged, 0x91, sizeof(forged));
        CHECK(!opens(key, &c, forged, sizeof(forged)));
    }
    {
        mp_span *pos = NULL;
        uint32_t np = 0;
        CHECK(rt_token_open(key, &c, u, n + 1, &pos, &np) == SX_ETOKEN);
        CHECK(pos == NULL);
    }
    free(u);
    free(t);
}

int main(void)
{
    if (sodium_init() < 0)
        return 1;
    randombytes_buf(key, sizeof(key));
    round_trip();
    tamper();
    return CHECK_DONE();
}
