/*
 * strong.c — the wait that makes a strong read strong: take every storage
 * partition's outbox head at query start (S_HEADS to every storage node, in
 * parallel: a node reports the partitions it holds alone and those whose
 * replicas it leads; a partition of several replicas that no node reported
 * is asked of its replicas again until its leader does), then poll the
 * covering index partitions' watermarks (I_WATERMARKS, in parallel, each
 * from the partition's leader: a call for the index partition, walked
 * through its replicas when it has several) with a short backoff until
 * each has applied, from every storage partition, at least up to that
 * head — or the deadline passes.
 *
 * A storage node holding only partitions of several replicas is not needed
 * by itself (its leaders' heads are reported by whichever replica leads
 * them), so its S_HEADS waits at most RT_LW_READ_ATTEMPT_MS, and while it
 * has answered nothing since a call to it failed (paused, cut off, down:
 * rt_leader_unanswered) it is not asked at first, only when a partition it
 * holds is still missing and it is not suspect (or every replica of that
 * partition is).
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

/* Whether storage node i holds partitions of several replicas only (at
 * least one): its heads are not needed from it. */
static bool heads_optional(const cfg_cluster *cfg, int i)
{
    bool replicated = false;

    for (int k = 0; k < cfg->nstorage; k++) {
        if (!cfg_part_on(&cfg->storage[k], i))
            continue;
        if (cfg->storage[k].nrep == 1)
            return false;
        replicated = true;
    }
    return replicated;
}

/* Fills calls[] with an S_HEADS to every storage node i with ask[i] (when
 * ask is NULL: every storage node but the optional ones that are
 * unanswered), replies into reps[]; returns how many. An optional node's
 * call is bounded (rt_rpc.bound_ms). */
static int heads_calls(router *rt, const msg_S_HEADS_req *req, const bool *ask, rt_rpc *calls,
                       msg_S_HEADS_rep *reps)
{
    const cfg_cluster *cfg = rt->cfg;
    int m = 0;

    for (int i = 0; i < cfg->nnodes; i++) {
        bool opt;

        if (cfg->nodes[i].role != SX_ROLE_STORAGE || (ask != NULL && !ask[i]))
            continue;
        opt = heads_optional(cfg, i);
        if (ask == NULL && opt && rt_leader_unanswered(&rt->leaders, i))
            continue;
        calls[m] = (rt_rpc){ .node = i,
                             .type = MSG_S_HEADS,
                             .req = req,
                             .rep = &reps[m],
                             .bound_ms = opt ? RT_LW_READ_ATTEMPT_MS : 0 };
        m++;
    }
    return m;
}

int rt_heads_calls(router *rt, const msg_S_HEADS_req *req, rt_rpc *calls, msg_S_HEADS_rep *reps)
{
    return heads_calls(rt, req, NULL, calls, reps);
}

/* Whether node's failed S_HEADS fails the heads: it holds a partition of
 * one replica whose head is not in yet (no other node can report it), or
 * no partition of several replicas at all. */
static bool heads_need(const cfg_cluster *cfg, int node, const bool *got)
{
    bool replicated = false;

    for (int k = 0; k < cfg->nstorage; k++) {
        if (!cfg_part_on(&cfg->storage[k], node))
            continue;
        if (cfg->storage[k].nrep == 1 && !got[k])
            return true;
        replicated = replicated || cfg->storage[k].nrep > 1;
    }
    return !replicated;
}

int rt_heads_collect(router *rt, const rt_rpc *calls, const msg_S_HEADS_rep *reps, int m,
                     uint64_t *heads, bool *got, rt_err *e)
{
    const cfg_cluster *cfg = rt->cfg;

    for (int i = 0; i < m; i++) {
        if (calls[i].err != 0) {
            if (heads_need(cfg, calls[i].node, got))
                return rt_rpc_fail(rt, &calls[i], e);
            continue;
        }
        if (reps[i].parts.n != reps[i].heads.n)
            return rt_errf(e, SX_EPROTO, "storage node %s sent malformed heads",
                           cfg->nodes[calls[i].node].name);
        for (uint32_t j = 0; j < reps[i].parts.n; j++)
            for (int k = 0; k < cfg->nstorage; k++) {
                if (cfg->storage[k].id != reps[i].parts.v[j])
                    continue;
                if (!got[k] || reps[i].heads.v[j] > heads[k])
                    heads[k] = reps[i].heads.v[j];
                got[k] = true;
                rt_leader_note(&rt->leaders, &cfg->storage[k], calls[i].node);
            }
    }
    return 0;
}

int rt_heads_missing(const router *rt, const bool *got)
{
    for (int k = 0; k < rt->cfg->nstorage; k++)
        if (rt->cfg->storage[k].nrep > 1 && !got[k])
            return k;
    return -1;
}

/* The failure of heads still missing storage partition index k after
 * waited_ms: "storage partition P: no leader reported its head within N
 * ms (asked s1, s2, s3; last failure: ...)". Its code: SX_EUNAVAIL when a
 * replica's last call failed (err[node], its reason in why[node]), else
 * SX_ENOTLEADER (every replica answered, none as the leader). */
static int heads_giveup(const router *rt, int k, uint64_t waited_ms, const int *err,
                        char (*why)[RT_ERRLEN], rt_err *e)
{
    const cfg_cluster *cfg = rt->cfg;
    const cfg_part *p = &cfg->storage[k];
    char names[CFG_MAX_REPLICAS * 64] = "";
    const char *last = NULL;
    size_t used = 0;

    for (int r = 0; r < p->nrep; r++) {
        int nd = p->rep[r];
        int w = snprintf(names + used, sizeof(names) - used, "%s%s", r > 0 ? ", " : "",
                         cfg->nodes[nd].name);
        used = w < 0 || (size_t)w >= sizeof(names) - used ? sizeof(names) - 1 : used + (size_t)w;
        if (err[nd] != 0)
            last = why[nd];
    }
    if (last != NULL)
        return rt_errf(e, SX_EUNAVAIL,
                       "storage partition %llu: no leader reported its head within %llu ms "
                       "(asked %s; last failure: %s)",
                       (unsigned long long)p->id, (unsigned long long)waited_ms, names, last);
    return rt_errf(e, SX_ENOTLEADER,
                   "storage partition %llu: no leader reported its head within %llu ms (asked %s)",
                   (unsigned long long)p->id, (unsigned long long)waited_ms, names);
}

/* Whether every replica of p is suspect at now. */
static bool all_suspect(router *rt, const cfg_part *p, uint64_t now)
{
    for (int r = 0; r < p->nrep; r++)
        if (!rt_leader_suspect(&rt->leaders, p, p->rep[r], now))
            return false;
    return true;
}

/* Every storage partition's head: heads[i] for cfg->storage[i]. Every
 * storage node is asked (heads_calls: but an optional one unanswered); a
 * partition of several replicas that none reported (no replica leads it
 * for sure yet: an election, a leader down) is asked of its replicas
 * again, after a pause growing as a walk's (rt_lw_pause_ms), until one
 * does or wait_ms is spent. */
static int take_heads(router *rt, uint64_t *heads, int wait_ms, rt_err *e)
{
    const cfg_cluster *cfg = rt->cfg;
    rt_rpc *calls = calloc((size_t)cfg->nnodes, sizeof(*calls));
    msg_S_HEADS_rep *reps = calloc((size_t)cfg->nnodes, sizeof(*reps));
    bool *got = calloc((size_t)cfg->nstorage + 1, sizeof(*got));
    bool *ask = calloc((size_t)cfg->nnodes, sizeof(*ask));
    int *err = calloc((size_t)cfg->nnodes, sizeof(*err));
    char(*why)[RT_ERRLEN] = calloc((size_t)cfg->nnodes, sizeof(*why));
    uint64_t start = rt_now_ms(), end = start + (uint64_t)wait_ms;
    msg_S_HEADS_req req;
    int m = 0, rc = 0, cycle = 0;

    memset(&req, 0, sizeof(req));
    if (calls == NULL || reps == NULL || got == NULL || ask == NULL || err == NULL || why == NULL) {
        rc = rt_errf(e, SX_ENOMEM, "out of memory");
        goto out;
    }
    /* first every storage node but the optional ones that are unanswered */
    for (int i = 0; i < cfg->nnodes; i++)
        ask[i] = !heads_optional(cfg, i) || !rt_leader_unanswered(&rt->leaders, i);
    for (;;) {
        uint64_t now = rt_now_ms();
        int miss, pause;

        m = heads_calls(rt, &req, ask, calls, reps);
        if ((rc = rt_rpc_run_ms(rt, calls, m, now < end ? (int)(end - now) : 1)) != 0) {
            rc = rt_errf(e, rc, "out of memory");
            goto out;
        }
        if ((rc = rt_heads_collect(rt, calls, reps, m, heads, got, e)) != 0)
            goto out;
        for (int i = 0; i < m; i++) {
            err[calls[i].node] = calls[i].err;
            if (calls[i].err != 0) {
                rt_err f;
                rt_rpc_fail(rt, &calls[i], &f);
                snprintf(why[calls[i].node], RT_ERRLEN, "%s", f.msg);
            }
        }
        rt_rpc_release(calls, m);
        m = 0;
        if ((miss = rt_heads_missing(rt, got)) < 0)
            break;
        pause = rt_lw_pause_ms(cycle++);
        now = rt_now_ms();
        if (now + (uint64_t)pause + RT_LW_ATTEMPT_MIN_MS > end || atomic_load(&rt->stopping)) {
            rc = heads_giveup(rt, miss, now - start, err, why, e);
            goto out;
        }
        sleep_ms((uint64_t)pause);
        /* again: the replicas of every partition still missing, but those
         * suspect (unless all of that partition's are) */
        now = rt_now_ms();
        for (int i = 0; i < cfg->nnodes; i++) {
            ask[i] = false;
            for (int k = 0; k < cfg->nstorage && !ask[i]; k++)
                ask[i] = !got[k] && cfg->storage[k].nrep > 1 && cfg_part_on(&cfg->storage[k], i) &&
                         (!rt_leader_suspect(&rt->leaders, &cfg->storage[k], i, now) ||
                          all_suspect(rt, &cfg->storage[k], now));
        }
    }
out:
    if (calls != NULL)
        rt_rpc_release(calls, m);
    free(calls);
    free(reps);
    free(got);
    free(ask);
    free(err);
    free(why);
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
        calls[i] = (rt_rpc){ .part = &cfg->index[first + i],
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
