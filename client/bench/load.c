/*
 * load.c — W6, bulk load: creates the table and its indexes (0, 1 or 2:
 * "by_town" on (town, lastname) projecting whole items, "by_last" on
 * lastname, keys only), waits until they are ready, then loads the data
 * set in batches (conc batches in flight through the asynchronous API),
 * and finally waits until the index partitions have applied every write
 * (a strong query: watermarks >= outbox heads). Items per second are
 * counted over all of it: the load is done when the indexes are current.
 * A batch whose put timed out (SX_ETIMEDOUT: outcome unknown, e.g. a router
 * giving up on a slow replicated partition) is sent again, up to
 * W6_RESENDS times (putting the same items again is harmless); b->resent
 * counts those, and its latency runs from the first send.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench.h"
#include "data.h"

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* Creates nidx indexes on b->table (an existing index is fine) and waits
 * for them to be ready: up to 60 s, or up to an hour when they are built
 * over loaded data (a backfill takes as long as the data needs). */
static int make_indexes(bench *b, int nidx, bool over_data)
{
    int rc;
    const char *on1[] = { "town", "lastname" };
    const char *on2[] = { "lastname" };
    if (nidx >= 1 &&
        (rc = sx_index_create(b->c, b->table, "by_town", on1, 2, SX_PROJ_ALL, NULL, 0)) &&
        rc != SX_EEXIST)
        return rc;
    if (nidx >= 2 &&
        (rc = sx_index_create(b->c, b->table, "by_last", on2, 1, SX_PROJ_KEYS, NULL, 0)) &&
        rc != SX_EEXIST)
        return rc;
    for (int tries = 0; tries < (over_data ? 36000 : 600); tries++) {
        sx_index_info *list = NULL;
        size_t n = 0, ready = 0;
        if ((rc = sx_index_list(b->c, b->table, &list, &n)))
            return rc;
        for (size_t k = 0; k < n; k++)
            ready += list[k].ready != 0;
        sx_index_list_free(list, n);
        if (ready == n)
            return SX_OK;
        sleep_ms(100);
    }
    return SX_ETIMEDOUT;
}

#define W6_RESENDS 3 /* sends of a batch after its first that timed out */

static void issue_batch(slot *s);
static void send_batch(slot *s);

static void done_batch(sx_op *op, void *arg)
{
    slot *s = arg;
    bench *b = s->b;
    int rc = sx_op_status(op);
    if (rc == SX_ETIMEDOUT && s->resends < W6_RESENDS) {
        s->resends++;
        if (__atomic_fetch_add(&b->resent, 1, __ATOMIC_RELAXED) == 0)
            fprintf(stderr, "shardex-bench: W6: a batch timed out, sent again: %s\n",
                    sx_op_errmsg(op));
        send_batch(s);
        return;
    }
    if (rc)
        bench_error(b, "put batch", rc, sx_op_errmsg(op));
    hist_add(&b->h, now_ns() - s->t0);
    __atomic_fetch_add(&b->ops, 1, __ATOMIC_RELAXED);
    if (rc) {
        slot_retire(s);
        return;
    }
    issue_batch(s);
}

/* Sends s's batch (s->pair: its number in the data set); on a submission
 * failure records it and retires s. */
static void send_batch(slot *s)
{
    bench *b = s->b;
    uint64_t lo = s->pair * (uint64_t)b->batch, hi = lo + (uint64_t)b->batch;
    if (hi > b->n)
        hi = b->n;
    size_t cnt = (size_t)(hi - lo), made = 0;
    sx_item **items = calloc(cnt, sizeof *items);
    int rc = items ? SX_OK : SX_ENOMEM;
    for (; !rc && made < cnt; made++)
        if (!(items[made] = data_item(b->seed, b->n, lo + made)))
            rc = SX_ENOMEM;
    if (!rc)
        rc = sx_put_batch_async(b->c, b->table, (const sx_item *const *)items, cnt, done_batch, s);
    for (size_t j = 0; j < made; j++)
        sx_item_free(items[j]);
    free(items);
    if (rc) {
        bench_error(b, "put batch", rc, sx_strerror(rc));
        slot_retire(s);
    }
}

/* Sends the next batch of the data set, or retires s when all are sent. */
static void issue_batch(slot *s)
{
    bench *b = s->b;
    uint64_t k = __atomic_fetch_add(&b->next, 1, __ATOMIC_RELAXED);
    if (k * (uint64_t)b->batch >= b->n) {
        slot_retire(s);
        return;
    }
    s->pair = k;
    s->resends = 0;
    s->t0 = now_ns();
    send_batch(s);
}

/* Waits until every index of the table has applied every acknowledged
 * write: a strong query over the whole index (so every index partition,
 * whose watermarks serve all indexes) returns only after the watermarks
 * cover the outbox heads. Bounded: 20 tries of 30 s. */
static int index_barrier(bench *b)
{
    sx_query_opts q = { .limit = 1, .consistency = SX_STRONG, .timeout_ms = 30000 };
    int rc = SX_ETIMEDOUT;
    for (int tries = 0; tries < 20 && rc == SX_ETIMEDOUT; tries++) {
        sx_result *r = NULL;
        rc = sx_query(b->c, b->table, "by_town", &q, &r);
        sx_result_free(r);
    }
    return rc;
}

int bench_load(bench *b, int nidx, bool after, double *items_per_s)
{
    int rc = sx_table_create(b->c, b->table, "id", NULL);
    if ((rc == 0 || rc == SX_EEXIST) && !after)
        rc = make_indexes(b, nidx, false);
    if (rc == SX_EEXIST)
        rc = SX_OK;
    if (rc) {
        bench_error(b, "schema", rc, sx_client_errmsg(b->c));
        return rc;
    }
    b->slots = calloc((size_t)b->conc, sizeof *b->slots);
    if (!b->slots)
        return SX_ENOMEM;
    uint64_t t0 = now_ns();
    b->active = b->conc;
    for (int k = 0; k < b->conc; k++) {
        b->slots[k] = (slot){ .b = b, .idx = k };
        issue_batch(&b->slots[k]);
    }
    pthread_mutex_lock(&b->lock);
    while (b->active > 0)
        pthread_cond_wait(&b->idle, &b->lock);
    pthread_mutex_unlock(&b->lock);
    sx_client_wait(b->c, -1);
    if (nidx > 0 && __atomic_load_n(&b->errors, __ATOMIC_RELAXED) == 0) {
        uint64_t t1 = now_ns();
        const char *what = after ? "index build" : "index barrier";
        rc = after ? make_indexes(b, nidx, true) : index_barrier(b);
        if (rc) {
            bench_error(b, what, rc, sx_client_errmsg(b->c));
            return rc;
        }
        fprintf(stderr, "shardex-bench: W6: load %.2f s, %s %.2f s\n", (double)(t1 - t0) / 1e9,
                what, (double)(now_ns() - t1) / 1e9);
    }
    double secs = (double)(now_ns() - t0) / 1e9;
    *items_per_s = secs > 0 ? (double)b->n / secs : 0;
    return SX_OK;
}
