/*
 * putmix.c — sx-putmix: many PUTs in flight at once through the real router,
 * so that they reach it in MULTI frames and take its combined path (one
 * S_WRITE per storage partition for a frame's PUTs, router/wcomb.c), mixed
 * with PUTs that must fail on their own: items without their key, an item
 * over the size limit, a table that does not exist, and batch PUTs whose
 * items span both storage partitions.
 *
 * Checks: every valid PUT succeeds with one nonzero version per item; each
 * invalid one fails with its own error (SX_EKEY naming "item 0", SX_ETOOBIG,
 * SX_ENOTABLE) and takes no other PUT down with it; then every item written
 * reads back with its own attributes, and no item of a failed PUT exists.
 *
 * Usage: sx-putmix ROUTER_URL TABLE_A TABLE_B   (tables with key "id", made
 * by the caller). Exit status 0 when everything held, 1 otherwise.
 * Versions are checked to be present and nonzero, one per item, and an
 * item's own attributes are read back: a version or item delivered to the
 * wrong PUT would show as a wrong tag or a missing item.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "shardex.h"

#define NPUT 200           /* single-item PUTs on table A */
#define NBATCH (NPUT / 50) /* batch PUTs of BATCH_N items on table A */
#define NB 6               /* single PUTs on table B among them */
#define BATCH_N 10
#define BIG_ITEM (512u * 1024u) /* over the item size limit (SX_MAX_ITEM) */

/* What each operation should end as, and what it ended as. */
typedef struct want {
    int expect; /* SX_OK or the error it must fail with */
    size_t nitems;
    int status;
    char msg[256];
    int zero_versions; /* versions that were 0 */
    size_t nversions;
    int done;
} want;

static want W[NPUT + NBATCH + NB + 1];

static void done(sx_op *op, void *arg)
{
    want *w = arg;

    w->status = sx_op_status(op);
    snprintf(w->msg, sizeof(w->msg), "%s", sx_op_errmsg(op));
    w->nversions = sx_op_nversions(op);
    for (size_t i = 0; i < w->nversions; i++)
        w->zero_versions += sx_op_version(op, i) == 0;
    __atomic_store_n(&w->done, 1, __ATOMIC_RELEASE);
}

/* Item id with attribute "tag" = "t<id>"; without its key when nokey. */
static sx_item *item(int64_t id, bool nokey)
{
    char tag[32];
    sx_item *it = sx_item_new();

    snprintf(tag, sizeof(tag), "t%lld", (long long)id);
    if (it == NULL || (!nokey && sx_item_set_int(it, "id", id) != 0) ||
        sx_item_set_str(it, "tag", tag) != 0) {
        sx_item_free(it);
        return NULL;
    }
    return it;
}

/* PUT i of table A must fail: every 17th lacks its key, and one is too big. */
static int expect_a(int i)
{
    if (i % 17 == 5)
        return SX_EKEY;
    if (i == 100)
        return SX_ETOOBIG;
    return SX_OK;
}

static int submit(sx_client *c, const char *ta, const char *tb)
{
    for (int i = 0; i < NPUT; i++) {
        want *w = &W[i];
        sx_item *it = item(i, expect_a(i) == SX_EKEY);

        if (it == NULL)
            return -1;
        if (i == 100) {
            char *big = malloc(BIG_ITEM);
            if (big == NULL ||
                sx_item_set_strn(it, "big", memset(big, 'x', BIG_ITEM), BIG_ITEM) != 0) {
                free(big);
                sx_item_free(it);
                return -1;
            }
            free(big);
        }
        w->expect = expect_a(i);
        w->nitems = 1;
        int rc = sx_put_async(c, ta, it, done, w);
        sx_item_free(it);
        if (rc != 0)
            return -1;
        if (i % 50 == 25) { /* batch PUTs among them, spanning partitions */
            int k = i / 50;
            sx_item *its[BATCH_N];
            for (int j = 0; j < BATCH_N; j++)
                if ((its[j] = item(100000 + k * BATCH_N + j, false)) == NULL)
                    return -1;
            w = &W[NPUT + k];
            w->expect = SX_OK;
            w->nitems = BATCH_N;
            rc = sx_put_batch_async(c, ta, (const sx_item *const *)its, BATCH_N, done, w);
            for (int j = 0; j < BATCH_N; j++)
                sx_item_free(its[j]);
            if (rc != 0)
                return -1;
        }
        if (i % 33 == 10) { /* table B among them */
            int k = i / 33;
            sx_item *bi = item(200000 + k, false);
            if (bi == NULL)
                return -1;
            w = &W[NPUT + NBATCH + k];
            w->expect = SX_OK;
            w->nitems = 1;
            rc = sx_put_async(c, tb, bi, done, w);
            sx_item_free(bi);
            if (rc != 0)
                return -1;
        }
    }
    want *w = &W[NPUT + NBATCH + NB]; /* a table that does not exist */
    sx_item *it = item(7, false);
    if (it == NULL)
        return -1;
    w->expect = SX_ENOTABLE;
    w->nitems = 1;
    int rc = sx_put_async(c, "putmix_no_such_table", it, done, w);
    sx_item_free(it);
    return rc;
}

/* Item id of table t reads back with its tag (present) or is absent. */
static void read_back(sx_client *c, const char *t, int64_t id, bool present)
{
    sx_item *key = sx_item_new(), *got = NULL;
    char tag[32];

    if (key == NULL || sx_item_set_int(key, "id", id) != 0) {
        CHECKF(0, "out of memory");
        sx_item_free(key);
        return;
    }
    int rc = sx_get(c, t, key, &got);
    sx_item_free(key);
    if (!present) {
        CHECKF(rc == SX_ENOTFOUND, "%s id %lld: expected absent, got %d", t, (long long)id, rc);
        sx_item_free(got);
        return;
    }
    CHECKF(rc == SX_OK, "%s id %lld: get failed: %s", t, (long long)id, sx_strerror(rc));
    if (rc == SX_OK) {
        const char *s = NULL;
        size_t n = 0;
        snprintf(tag, sizeof(tag), "t%lld", (long long)id);
        CHECKF(sx_item_get_str(got, "tag", &s, &n) == 0 && n == strlen(tag) &&
                   memcmp(s, tag, n) == 0,
               "%s id %lld: wrong tag", t, (long long)id);
    }
    sx_item_free(got);
}

int main(int argc, char **argv)
{
    sx_client *c = NULL;

    if (argc != 4) {
        fprintf(stderr, "usage: sx-putmix ROUTER_URL TABLE_A TABLE_B\n");
        return 2;
    }
    if (sx_client_open(argv[1], &c) != 0 || submit(c, argv[2], argv[3]) != 0) {
        fprintf(stderr, "putmix: cannot start the puts\n");
        sx_client_close(c);
        return 1;
    }
    CHECKF(sx_client_wait(c, 60000) == 0, "puts still in flight after 60 s");
    for (size_t i = 0; i < sizeof(W) / sizeof(W[0]); i++) {
        want *w = &W[i];
        if (!__atomic_load_n(&w->done, __ATOMIC_ACQUIRE)) {
            CHECKF(0, "operation %zu never completed", i);
            continue;
        }
        CHECKF(w->status == w->expect, "operation %zu: status %d (%s), expected %d", i, w->status,
               w->msg, w->expect);
        if (w->expect == SX_OK && w->status == SX_OK)
            CHECKF(w->nversions == w->nitems && w->zero_versions == 0,
                   "operation %zu: %zu versions (%d of them 0) for %zu items", i, w->nversions,
                   w->zero_versions, w->nitems);
        if (w->expect == SX_EKEY)
            CHECKF(strstr(w->msg, "item 0") != NULL && strstr(w->msg, "'id'") != NULL,
                   "operation %zu: message does not name the item and key: %s", i, w->msg);
    }
    for (int i = 0; i < NPUT; i++)
        if (expect_a(i) != SX_EKEY)
            read_back(c, argv[2], i, expect_a(i) == SX_OK);
    for (int j = 0; j < NBATCH * BATCH_N; j++)
        read_back(c, argv[2], 100000 + j, true);
    for (int k = 0; k < NB; k++)
        read_back(c, argv[3], 200000 + k, true);
    sx_client_close(c);
    if (CHECK_FAILED() == 0)
        printf("putmix: %d PUTs and %d batch PUTs in flight at once: each answered on "
               "its own, every item read back\n",
               NPUT, NBATCH);
    return CHECK_FAILED() == 0 ? 0 : 1;
}
