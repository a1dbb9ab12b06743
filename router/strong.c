/*
 * strong.c — the wait that makes a strong read strong: take every storage
 * partition's outbox head (S_HEADS to every storage node, in parallel) at
 * query start, then poll the covering index partitions' watermarks
 * (I_WATERMARKS, in parallel) with a short backoff until each has applied,
 * from every storage partition, at least up to that head — or the
 * deadline passes.
 *
 * Built with -DSHARDEX_TEST_HOOKS=ON only, the chaos harness's planted bug
 * "strong-skips-wait" (tests/chaos/README.md, "Planted bugs"): with
 * SHARDEX_PLANT=strong-skips-wait in the router's environment,
 * rt_strong_wait returns at once, so a strong query is only verified. Never
 * reachable from a config file; absent from other builds.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fiber.h"
#include "query.h"
#include "sx_errors.h"

#ifdef SHARDEX_TEST_HOOKS
#include <stdatomic.h>

/* 1 when the planted bug is on (SHARDEX_PLANT names it), read once: the
 * cache is an atomic any thread may fill (all fill it alike). */
static bool plant_skips_wait(void)
{
    static atomic_int on = -1;
    int v = atomic_load(&on);

    if (v < 0) {
        const char *p = getenv("SHARDEX_PLANT");
        v = p != NULL && strcmp(p, "strong-skips-wait") == 0;
        atomic_store(&on, v);
    }
    return v == 1;
}
#else
#define plant_skips_wait() false
#endif

#define RT_POLL_MIN_MS 1
#define RT_POLL_MAX_MS 50
#define RT_POLL_FLOOR_MS 20

/* Parks the request's fiber (not the router's thread) for ms. */
static void sleep_ms(uint64_t ms)
{
    fib_sleep_ms((int)ms);
}

int rt_heads_calls(router *rt, const msg_S_HEADS_req *req, rt_rpc *calls, msg_S_HEADS_rep *reps)
{
    const cfg_cluster *cfg = rt->cfg;
    int m = 0;

    for (int i = 0; i < cfg->nnodes; i++) {
        if (cfg->nodes[i].role != SX_ROLE_STORAGE)
            continue;
        calls[m] = (rt_rpc){ .node = i, .type = MSG_S_HEADS, .req = req, .rep = &reps[m] };
        m++;
    }
    return m;
}

int rt_heads_collect(router *rt, const rt_rpc *calls, const msg_S_HEADS_rep *reps, int m,
                     uint64_t *heads, rt_err *e)
{
    const cfg_cluster *cfg = rt->cfg;

    for (int i = 0; i < m; i++) {
        if (calls[i].err != 0)
            return rt_rpc_fail(rt, &calls[i], e);
        if (reps[i].parts.n != reps[i].heads.n)
            return rt_errf(e, SX_EPROTO, "storage node %s sent malformed heads",
                           cfg->nodes[calls[i].node].name);
        for (uint32_t j = 0; j < reps[i].parts.n; j++)
            for (int k = 0; k < cfg->nstorage; k++)
                if (cfg->storage[k].id == reps[i].parts.v[j])
                    heads[k] = reps[i].heads.v[j];
    }
    return 0;
}

/* Every storage partition's head: heads[i] for cfg->storage[i]. */
static int take_heads(router *rt, uint64_t *heads, int wait_ms, rt_err *e)
{
    const cfg_cluster *cfg = rt->cfg;
    rt_rpc *calls = calloc((size_t)cfg->nnodes, sizeof(*calls));
    msg_S_HEADS_rep *reps = calloc((size_t)cfg->nnodes, sizeof(*reps));
    msg_S_HEADS_req req;
    int m = 0, rc = 0;

    memset(&req, 0, sizeof(req));
    if (calls == NULL || reps == NULL) {
        rc = rt_errf(e, SX_ENOMEM, "out of memory");
        goto out;
    }
    m = rt_heads_calls(rt, &req, calls, reps);
    if ((rc = rt_rpc_run_ms(rt, calls, m, wait_ms)) != 0) {
        rc = rt_errf(e, rc, "out of memory");
        goto out;
    }
    rc = rt_heads_collect(rt, calls, reps, m, heads, e);
out:
    if (calls != NULL)
        rt_rpc_release(calls, m);
    free(calls);
    free(reps);
    return rc;
}

/* The watermark of source in a watermarks reply (0 when absent). */
static uint64_t wm_of(const msg_I_WATERMARKS_rep *r, uint64_t source)
{
    uint32_t i;

    for (i = 0; i < r->sources.n && i < r->wms.n; i++)
        if (r->sources.v[i] == source)
            return r->wms.v[i];
    return 0;
}

/* One poll: 1 when every index partition caught up, 0 when not (the first
 * lagging pair described in lag), or a negative sx_err (reason in e). */
static int poll_once(router *rt, int first, int count, const uint64_t *heads, int wait_ms,
                     char *lag, size_t laglen, rt_err *e)
{
    const cfg_cluster *cfg = rt->cfg;
    rt_rpc *calls = calloc((size_t)count, sizeof(*calls));
    msg_I_WATERMARKS_req *reqs = calloc((size_t)count, sizeof(*reqs));
    msg_I_WATERMARKS_rep *reps = calloc((size_t)count, sizeof(*reps));
    int i, k, rc = 1;

    if (calls == NULL || reqs == NULL || reps == NULL) {
        rc = -rt_errf(e, SX_ENOMEM, "out of memory");
        goto out;
    }
    for (i = 0; i < count; i++) {
        reqs[i].part = cfg->index[first + i].id;
        calls[i] = (rt_rpc){ .node = cfg->index[first + i].node,
                             .type = MSG_I_WATERMARKS,
                             .req = &reqs[i],
                             .rep = &reps[i] };
    }
    if (rt_rpc_run_ms(rt, calls, count, wait_ms) != 0) {
        rc = -rt_errf(e, SX_ENOMEM, "out of memory");
        goto out;
    }
    for (i = 0; i < count && rc == 1; i++) {
        if (calls[i].err != 0) {
            rc = -rt_rpc_fail(rt, &calls[i], e);
            break;
        }
        for (k = 0; k < cfg->nstorage; k++) {
            uint64_t wm = wm_of(&reps[i], cfg->storage[k].id);
            if (heads[k] == 0 || wm >= heads[k])
                continue;
            snprintf(lag, laglen,
                     "index partition %llu still behind storage "
                     "partition %llu (watermark %llu < head %llu)",
                     (unsigned long long)reqs[i].part, (unsigned long long)cfg->storage[k].id,
                     (unsigned long long)wm, (unsigned long long)heads[k]);
            rc = 0;
            break;
        }
    }
out:
    if (calls != NULL)
        rt_rpc_release(calls, count);
    free(calls);
    free(reqs);
    free(reps);
    return rc;
}

int rt_strong_wait(router *rt, int first, int count, uint64_t timeout_ms, rt_err *e)
{
    uint64_t *heads, start, now, pause = RT_POLL_MIN_MS;
    char lag[RT_ERRLEN] = "";
    int rc;

    if (count <= 0 || plant_skips_wait())
        return 0;
    if (timeout_ms > RT_STRONG_MAX_MS)
        timeout_ms = RT_STRONG_MAX_MS;
    heads = calloc((size_t)rt->cfg->nstorage + 1, sizeof(*heads));
    if (heads == NULL)
        return rt_errf(e, SX_ENOMEM, "out of memory");
    start = rt_now_ms();
    rc = take_heads(rt, heads, (int)timeout_ms, e);
    if (rc != 0) {
        char why[RT_ERRLEN];
        snprintf(why, sizeof(why), "%s", e->msg);
        rt_errf(e, rc, "strong read: cannot take the storage heads: %s", why);
    }
    while (rc == 0) {
        uint64_t spent = rt_now_ms() - start;
        /* each poll gets what is left of the deadline, but at least a
         * moment, so a slow answer is not mistaken for a missing one */
        int left = spent + RT_POLL_FLOOR_MS >= timeout_ms ? RT_POLL_FLOOR_MS
                                                          : (int)(timeout_ms - spent);
        int r = poll_once(rt, first, count, heads, left, lag, sizeof(lag), e);
        if (r < 0) {
            rc = -r;
            if (rc == SX_ETIMEDOUT && lag[0] != '\0') {
                /* the last poll ran out of time: the lag seen before it is
                 * the better explanation */
                rt_errf(e, rc, "strong read: %s after %llu ms", lag,
                        (unsigned long long)timeout_ms);
            } else if (rc == SX_ETIMEDOUT) {
                char why[RT_ERRLEN];
                snprintf(why, sizeof(why), "%s", e->msg);
                rt_errf(e, rc, "strong read: %s", why);
            }
            break;
        }
        if (r == 1)
            break;
        now = rt_now_ms();
        if (now - start >= timeout_ms) {
            rc = rt_errf(e, SX_ETIMEDOUT, "strong read: %s after %llu ms", lag,
                         (unsigned long long)timeout_ms);
            break;
        }
        if (atomic_load(&rt->stopping)) {
            rc = rt_errf(e, SX_EUNAVAIL, "strong read: the router is stopping (%s)", lag);
            break;
        }
        if (pause > timeout_ms - (now - start))
            pause = timeout_ms - (now - start);
        sleep_ms(pause);
        pause = pause * 2 > RT_POLL_MAX_MS ? RT_POLL_MAX_MS : pause * 2;
    }
    free(heads);
    return rc;
}
