/*
 * lag.c — W7, index lag: while a background load puts fresh items at a
 * fixed rate (open loop, at most 1024 in flight), each of the run's conc
 * probe slots puts one item with a town of its own, notes the
 * acknowledgement time, and repeats an eventual query on that town until
 * the item is visible; the time from acknowledgement to visibility goes
 * into the histogram (resolution: one query round trip), and the slot
 * starts its next probe. Probes are numbered across the slots (each number
 * gives the probe its id and town) and alternate between towns on both
 * sides of the index split point, so both index partitions are measured.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench.h"
#include "data.h"

#define LAG_MAX_INFLIGHT 1024

static void probe_put(slot *s);

#define PROBE_TOWN_MAX 48

static void probe_town(const slot *s, char *t)
{
    snprintf(t, PROBE_TOWN_MAX, "%cag%07llu-%llu", (s->probe & 1) ? 'Z' : 'L',
             (unsigned long long)s->probe, (unsigned long long)s->b->id_base);
}

static void probe_seen(sx_op *op, void *arg);

static void probe_query(slot *s)
{
    char t[PROBE_TOWN_MAX];
    probe_town(s, t);
    sx_value eq[1] = { sx_val_str(t) };
    sx_query_opts q = { .eq = eq, .neq = 1, .limit = 1, .consistency = SX_EVENTUAL };
    SLOT_SUBMIT(s, sx_query_async(s->b->c, s->b->table, s->b->index, &q, probe_seen, s));
}

static void probe_seen(sx_op *op, void *arg)
{
    slot *s = arg;
    int rc = sx_op_status(op);
    sx_result *r = sx_op_take_result(op);
    size_t n = sx_result_count(r);
    sx_result_free(r);
    uint64_t t = now_ns();
    if (rc) {
        bench_error(s->b, "probe query", rc, sx_op_errmsg(op));
        slot_retire(s);
        return;
    }
    if (n == 0 && t - s->tack < 30ULL * 1000000000ULL) {
        probe_query(s); /* not visible yet: ask again */
        return;
    }
    if (n == 0)
        __atomic_fetch_add(&s->b->bad, 1, __ATOMIC_RELAXED);
    else
        hist_add(&s->b->h, t - s->tack);
    __atomic_fetch_add(&s->b->ops, 1, __ATOMIC_RELAXED);
    if (t >= s->b->t_end)
        slot_retire(s);
    else
        probe_put(s);
}

static void probe_acked(sx_op *op, void *arg)
{
    slot *s = arg;
    int rc = sx_op_status(op);
    s->tack = now_ns();
    if (rc) {
        bench_error(s->b, "probe put", rc, sx_op_errmsg(op));
        slot_retire(s);
        return;
    }
    probe_query(s);
}

/* Starts s's next probe: takes the next probe number (b->next). */
static void probe_put(slot *s)
{
    char t[PROBE_TOWN_MAX];
    s->probe = __atomic_fetch_add(&s->b->next, 1, __ATOMIC_RELAXED);
    probe_town(s, t);
    sx_item *it = data_item_with(s->b->seed, s->b->id_base + (1ULL << 23) + s->probe, t, "probe");
    if (!it) {
        bench_error(s->b, "probe", SX_ENOMEM, "out of memory");
        slot_retire(s);
        return;
    }
    SLOT_SUBMIT(s, sx_put_async(s->b->c, s->b->table, it, probe_acked, s));
    sx_item_free(it);
}

/* Background writes: completions only count. */
typedef struct bg {
    bench *b;
    uint64_t inflight, done;
} bg;

static void bg_done(sx_op *op, void *arg)
{
    bg *g = arg;
    int rc = sx_op_status(op);
    if (rc)
        bench_error(g->b, "background put", rc, sx_op_errmsg(op));
    __atomic_fetch_add(&g->done, 1, __ATOMIC_RELAXED);
    __atomic_fetch_sub(&g->inflight, 1, __ATOMIC_RELAXED);
}

int bench_lag(bench *b, double *write_rate)
{
    b->slots = calloc((size_t)b->conc, sizeof *b->slots);
    if (!b->slots)
        return SX_ENOMEM;
    bg g = { .b = b };
    uint64_t rng = b->seed + 17, sent = 0, t0 = now_ns(), skipped = 0;
    b->active = b->conc;
    for (int i = 0; i < b->conc; i++)
        b->slots[i] = (slot){ .b = b, .idx = i };
    for (int i = 0; i < b->conc; i++)
        probe_put(&b->slots[i]);
    for (;;) {
        uint64_t t = now_ns();
        if (t >= b->t_end)
            break;
        uint64_t due = (uint64_t)(b->rate * (double)(t - t0) / 1e9);
        while (sent < due) {
            if (__atomic_load_n(&g.inflight, __ATOMIC_RELAXED) >= LAG_MAX_INFLIGHT) {
                skipped += due - sent; /* the cluster cannot keep up */
                sent = due;
                break;
            }
            char tw[16], l[16];
            data_fresh_pair(rng_next(&rng) % data_npairs(b->n), tw, l);
            sx_item *it = data_item_with(b->seed, b->id_base + sent, tw, l);
            __atomic_fetch_add(&g.inflight, 1, __ATOMIC_RELAXED);
            int rc = it ? sx_put_async(b->c, b->table, it, bg_done, &g) : SX_ENOMEM;
            sx_item_free(it);
            if (rc) {
                __atomic_fetch_sub(&g.inflight, 1, __ATOMIC_RELAXED);
                bench_error(b, "background put", rc, sx_strerror(rc));
            }
            sent++;
        }
        struct timespec ts = { 0, 1000000L };
        nanosleep(&ts, NULL);
    }
    uint64_t t_stop = now_ns();
    pthread_mutex_lock(&b->lock);
    while (b->active > 0)
        pthread_cond_wait(&b->idle, &b->lock);
    pthread_mutex_unlock(&b->lock);
    sx_client_wait(b->c, -1);
    if (skipped)
        fprintf(stderr, "shardex-bench: W7: %llu background writes skipped (1024 in flight)\n",
                (unsigned long long)skipped);
    *write_rate = (double)__atomic_load_n(&g.done, __ATOMIC_RELAXED) /
                  ((double)(t_stop - t0) / 1e9);
    return SX_OK;
}
