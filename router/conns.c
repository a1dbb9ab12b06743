/*
 * conns.c — the router's calls to storage and index nodes: one link per
 * node (net_peer_open_link: dialed at start-up, redialed in the
 * background, shared by every request), typed calls that encode a request
 * struct and decode the reply, fan-out in parallel, and raw forwarding. A
 * call for a replicated storage or index partition is walked through its
 * replicas (leader.h): the leader cache picks the first, rt_lw_attempt_ms
 * bounds each attempt, rt_lw_next picks each next one, and the fan-out runs
 * rounds of attempts until every walk is done. Such a call asks its link
 * whether it was sent (net_peer_call.unsent), so that one that never left
 * (its connection dropped, or stayed busy with a stalled node) moves on at
 * once, a write too. Every attempt's outcome goes to the leader cache
 * (rt_leader_seen): a node that stops answering is passed over.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "router.h"
#include "fiber.h"
#include "net.h"
#include "sx_errors.h"

int rt_errf(rt_err *e, int code, const char *fmt, ...)
{
    va_list ap;

    if (e != NULL) {
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
        va_end(ap);
    }
    return code;
}

int rt_key_errf(rt_err *e, const cat_table *t, size_t enc_len, const char *what)
{
    if (enc_len > SX_MAX_KEY)
        return rt_errf(e, SX_EKEY, "%s: the key is %zu bytes encoded; the limit is %d", what,
                       enc_len, SX_MAX_KEY);
    if (t->sk)
        return rt_errf(e, SX_EKEY,
                       "%s: key attributes '%s' and '%s' must be present with "
                       "scalar values (not null, a list or a map)",
                       what, t->pk, t->sk);
    return rt_errf(e, SX_EKEY,
                   "%s: key attribute '%s' must be present with a scalar value "
                   "(not null, a list or a map)",
                   what, t->pk);
}

const char *rt_role_name(int role)
{
    switch (role) {
    case SX_ROLE_STORAGE: return "storage";
    case SX_ROLE_INDEX: return "index";
    case SX_ROLE_ROUTER: return "router";
    default: return "unknown";
    }
}

/* How long a call waits for a connection to a node that has none: a
 * little more than a link's longest redial interval (500 ms, lpeer.c). */
#define RT_CONNECT_WAIT_MS 600
#define RT_DOWN_HOLD_MS 1000

/* True when node i's link is up. */
static bool conn_known_up(router *rt, int i)
{
    return net_peer_connected(rt->peers[i]);
}

/* Waits up to RT_CONNECT_WAIT_MS, for all of them at once, until every
 * dialed node of the calls has a connection; nodes still without one are
 * then held "down" for RT_DOWN_HOLD_MS, during which calls to them fail
 * at once (a reconnection ends the hold: the pipe event is seen first). */
static void conns_wait(router *rt, rt_rpc *const *calls, int n)
{
    int waited, i;
    bool all;

    for (waited = 0;; waited += 10) {
        all = true;
        for (i = 0; i < n; i++) {
            int nd = calls[i]->node;
            if (nd >= 0 && nd < rt->cfg->nnodes && rt->dialed[nd] && !conn_known_up(rt, nd) &&
                rt_now_ms() >= atomic_load(&rt->down_until[nd]))
                all = false;
        }
        if (all)
            return;
        if (waited >= RT_CONNECT_WAIT_MS)
            break;
        fib_sleep_ms(10);
    }
    for (i = 0; i < n; i++) {
        int nd = calls[i]->node;
        if (nd >= 0 && nd < rt->cfg->nnodes && rt->dialed[nd] && !conn_known_up(rt, nd))
            atomic_store(&rt->down_until[nd], rt_now_ms() + RT_DOWN_HOLD_MS);
    }
}

bool rt_conn_up(router *rt, int i)
{
    rt_rpc c, *one = &c;

    memset(&c, 0, sizeof(c));
    c.node = i;
    conns_wait(rt, &one, 1);
    return conn_known_up(rt, i);
}

/* Decodes one finished job into its call. */
static void rpc_finish(rt_rpc *c, net_job *j)
{
    if (j->err != 0) {
        c->err = j->err;
        if (j->unsent) {
            c->how = RT_LH_UNSENT;
            c->down = true;
            if (j->err == SX_ETIMEDOUT)
                snprintf(c->msg, sizeof(c->msg),
                         "not sent within %d ms (the connection stayed busy: node stalled?)",
                         c->attempt_ms);
            else
                snprintf(c->msg, sizeof(c->msg), "not sent: %s (node down?)", sx_strerror(j->err));
        } else {
            c->how = RT_LH_LOST;
            snprintf(c->msg, sizeof(c->msg), "call failed (%s)", sx_strerror(j->err));
        }
        free(j->resp);
        j->resp = NULL;
        return;
    }
    c->how = RT_LH_ANSWERED;
    c->frame = j->resp;
    j->resp = NULL;
    c->err = msg_decode_rep(c->type, c->frame, j->resp_n, c->rep, c->msg, sizeof(c->msg));
    if (c->err == SX_ENOTLEADER)
        c->hint = msg_err_hint(c->frame, j->resp_n);
    if (c->err != 0 && c->msg[0] == '\0') {
        /* not the reply expected: say what came instead, for the log */
        msg_type t = MSG_PING;
        int is_reply = 0, pk = msg_peek(c->frame, j->resp_n, &t, &is_reply);

        static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
        static log_ratelimit rl;
        unsigned skipped = 0;
        int ok;

        snprintf(c->msg, sizeof(c->msg), "%s", sx_strerror(c->err));
        pthread_mutex_lock(&mu);
        ok = log_ratelimit_ok(&rl, 1000, &skipped);
        pthread_mutex_unlock(&mu);
        if (ok)
            LOG_WARN("node %d answered %s with an undecodable frame: %zu bytes, %s%s%s "
                     "(%u more since the last report)",
                     c->node, msg_name(c->type), j->resp_n,
                     pk != 0    ? "no message header"
                     : is_reply ? "a reply of "
                                : "a request of ",
                     pk != 0 ? "" : msg_name(t), pk != 0 ? "" : " type", skipped);
    }
}

/* Encodes call c into b; on failure marks the call failed. Returns true
 * when the call is ready to send. */
static bool rpc_prepare(router *rt, rt_rpc *c, mp_buf *b)
{
    c->err = 0;
    c->msg[0] = '\0';
    c->frame = NULL;
    c->hint = 0;
    c->how = RT_LH_LOCAL;
    c->down = false;
    c->no_leader = false;
    if (c->node < 0 || c->node >= rt->cfg->nnodes || !rt->dialed[c->node]) {
        c->err = SX_EINTERNAL;
        snprintf(c->msg, sizeof(c->msg), "no connection to node %d", c->node);
        return false;
    }
    if (!conn_known_up(rt, c->node)) { /* after conns_wait */
        c->how = RT_LH_UNSENT;
        c->down = true;
        c->err = SX_EUNAVAIL;
        snprintf(c->msg, sizeof(c->msg), "not connected (node down?)");
        return false;
    }
    if (msg_encode_req(c->type, c->req, b) != 0 || b->oom) {
        c->err = SX_ENOMEM;
        snprintf(c->msg, sizeof(c->msg), "cannot encode %s", msg_name(c->type));
        return false;
    }
    if (b->sb.size > NET_REQ_MAX) {
        /* the peer would drop it unanswered (NNG_OPT_RECVMAXSZ) */
        c->err = SX_ETOOBIG;
        snprintf(c->msg, sizeof(c->msg),
                 "%s request of %zu bytes exceeds the "
                 "%u-byte frame limit",
                 msg_name(c->type), (size_t)b->sb.size, NET_REQ_MAX);
        return false;
    }
    return true;
}

uint64_t rt_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int rt_rpc_run(router *rt, rt_rpc *calls, int n)
{
    return rt_rpc_run_ms(rt, calls, n, rt->timeout_ms);
}

/* One attempt of each of the n calls of set, concurrently, each bounded by
 * its attempt_ms; what each showed of its node goes to the leader cache.
 * Returns 0 when they ran (look at each err), SX_ENOMEM otherwise. */
static int rpc_attempt(router *rt, rt_rpc *const *set, int n)
{
    net_job *jobs = NULL;
    mp_buf *bufs = NULL;
    int *map = NULL;
    int i, m = 0, rc = 0;

    if (n <= 0)
        return 0;
    jobs = calloc((size_t)n, sizeof(*jobs));
    bufs = calloc((size_t)n, sizeof(*bufs));
    map = calloc((size_t)n, sizeof(*map));
    if (jobs == NULL || bufs == NULL || map == NULL) {
        rc = SX_ENOMEM;
        goto out;
    }
    conns_wait(rt, set, n);
    for (i = 0; i < n; i++) {
        mp_buf_init(&bufs[i]);
        if (!rpc_prepare(rt, set[i], &bufs[i]))
            continue;
        jobs[m].peer = rt->peers[set[i]->node];
        /* a scan page can take long; catalog changes sync: alone, so that
         * they never hold up the calls they would share a frame with */
        jobs[m].solo = set[i]->type == MSG_S_RANGE || set[i]->type == MSG_CAT_UPDATE ||
                       set[i]->type == MSG_CAT_BACKFILLED;
        jobs[m].req = (const uint8_t *)bufs[i].sb.data;
        jobs[m].req_n = bufs[i].sb.size;
        jobs[m].timeout_ms = set[i]->attempt_ms > 0 ? set[i]->attempt_ms : 1;
        jobs[m].fail_unsent = set[i]->fail_unsent;
        map[m++] = i;
    }
    if (m > 0 && net_call_all(jobs, m, 1) != 0) {
        for (i = 0; i < m; i++)
            free(jobs[i].resp);
        rc = SX_ENOMEM;
        goto out;
    }
    for (i = 0; i < m; i++)
        rpc_finish(set[map[i]], &jobs[i]);
    uint64_t now = rt_now_ms();
    for (i = 0; i < n; i++)
        rt_leader_seen(&rt->leaders, set[i]->node, set[i]->how, now);
out:
    if (bufs != NULL)
        for (i = 0; i < n; i++)
            mp_buf_free(&bufs[i]);
    free(map);
    free(bufs);
    free(jobs);
    return rc;
}

/* Ends call c's walk w, which wants another attempt though the call's time
 * (began at start) is spent (less than RT_LW_ATTEMPT_MIN_MS would be left
 * after the pause): its failure becomes rt_lw_giveup's. */
static void walk_giveup(const router *rt, rt_rpc *c, const rt_lwalk *w, uint64_t start)
{
    rt_err last;

    rt_rpc_fail(rt, c, &last);
    c->err = rt_lw_giveup(w, c->err, last.msg, rt_now_ms() - start, c->msg, sizeof(c->msg));
    c->no_leader = true;
}

/* Sets call c's attempt_ms and fail_unsent for an attempt of walk w (the
 * call not walked: its bound_ms, if any) with left_ms of its time left. */
static void attempt_bound(router *rt, rt_rpc *c, const rt_lwalk *w, int left_ms)
{
    if (left_ms < 1)
        left_ms = 1;
    if (w != NULL && w->walks) {
        c->attempt_ms = rt_lw_attempt_ms(w, left_ms);
        c->fail_unsent = true;
    } else if (c->bound_ms > 0) {
        c->attempt_ms = c->bound_ms < left_ms ? c->bound_ms : left_ms;
        c->fail_unsent = true;
    } else {
        c->attempt_ms = left_ms;
        c->fail_unsent = false;
    }
}

/* The calls (some for replicated partitions) walked to the end: rounds of
 * attempts, each of the calls due then (all at first; later those whose
 * walk asked for another attempt and whose pause has passed), until every
 * walk is done or the time is spent. set has room for n. */
static int rpc_walk(router *rt, rt_rpc *calls, rt_rpc **set, int n, int timeout_ms)
{
    rt_lwalk *walks = calloc((size_t)n, sizeof(*walks));
    uint64_t *at = calloc((size_t)n, sizeof(*at));
    uint64_t *sent = calloc((size_t)n, sizeof(*sent));
    bool *due = calloc((size_t)n, sizeof(*due));
    uint64_t start = rt_now_ms(), end = start + (uint64_t)timeout_ms;
    int i, rc = 0;

    if (walks == NULL || at == NULL || sent == NULL || due == NULL) {
        rc = SX_ENOMEM;
        goto out;
    }
    for (i = 0; i < n; i++) {
        rt_lw_start(&walks[i], &rt->leaders, calls[i].part, calls[i].type == MSG_S_WRITE, start);
        if (calls[i].part != NULL)
            calls[i].node = walks[i].node; /* the cache may have moved since */
        due[i] = true;
    }
    for (;;) {
        uint64_t now = rt_now_ms(), next = UINT64_MAX;
        int m = 0;

        for (i = 0; i < n; i++) {
            if (due[i] && at[i] <= now) {
                attempt_bound(rt, &calls[i], &walks[i], now < end ? (int)(end - now) : 1);
                sent[i] = now;
                set[m++] = &calls[i];
            } else if (due[i] && at[i] < next) {
                next = at[i];
            }
        }
        if (m == 0 && next == UINT64_MAX)
            break;
        if (m == 0) {
            fib_sleep_ms((int)(next - now));
            continue;
        }
        rc = rpc_attempt(rt, set, m);
        if (rc != 0)
            break;
        now = rt_now_ms();
        for (int k = 0; k < m; k++) {
            rt_rpc *c = set[k];
            rt_lwalk *w = &walks[c - calls];

            due[c - calls] = false;
            if (rt_lw_next(w, c->err, c->hint, c->how, now) == RT_LW_DONE) {
                if (rt_lw_unknown_outcome(w, c->how))
                    rt_lw_unknown(c->err, (int)(now - sent[c - calls]), c->msg, sizeof(c->msg));
                continue;
            }
            now = rt_now_ms();
            if (now + (uint64_t)w->pause_ms + RT_LW_ATTEMPT_MIN_MS > end ||
                atomic_load(&rt->stopping)) {
                walk_giveup(rt, c, w, start);
                continue;
            }
            /* the next attempt decodes into rep afresh (msg_decode_rep
             * zeroes it first) */
            rt_rpc_release(c, 1);
            c->node = w->node;
            at[c - calls] = now + (uint64_t)w->pause_ms;
            due[c - calls] = true;
        }
    }
out:
    free(walks);
    free(at);
    free(sent);
    free(due);
    return rc;
}

int rt_rpc_run_ms(router *rt, rt_rpc *calls, int n, int timeout_ms)
{
    rt_rpc **set;
    bool walks = false;
    int i, rc;

    if (n <= 0)
        return 0;
    if (timeout_ms <= 0)
        timeout_ms = 1;
    set = malloc((size_t)n * sizeof(*set));
    if (set == NULL)
        return SX_ENOMEM;
    for (i = 0; i < n; i++) {
        if (calls[i].part != NULL) {
            calls[i].node = rt_leader_get(&rt->leaders, calls[i].part);
            walks = walks || rt_leader_walks(&rt->leaders, calls[i].part);
        }
        set[i] = &calls[i];
    }
    if (!walks)
        for (i = 0; i < n; i++)
            attempt_bound(rt, &calls[i], NULL, timeout_ms);
    rc = walks ? rpc_walk(rt, calls, set, n, timeout_ms) : rpc_attempt(rt, set, n);
    free(set);
    return rc;
}

void rt_rpc_release(rt_rpc *calls, int n)
{
    int i;

    for (i = 0; i < n; i++) {
        if (calls[i].rep != NULL)
            msg_free_rep(calls[i].type, calls[i].rep);
        free(calls[i].frame);
        calls[i].frame = NULL;
    }
}

int rt_rpc_fail(const router *rt, const rt_rpc *c, rt_err *e)
{
    const cfg_node *nd = NULL;

    if (c->node >= 0 && c->node < rt->cfg->nnodes)
        nd = &rt->cfg->nodes[c->node];
    if (nd == NULL || c->no_leader)
        return rt_errf(e, c->err, "%s", c->msg);
    if (c->err == SX_EUNAVAIL || c->err == SX_ENET || c->err == SX_ETIMEDOUT)
        return rt_errf(e, c->err, "%s node %s at %s: %s", rt_role_name(nd->role), nd->name, nd->url,
                       c->msg);
    return rt_errf(e, c->err, "%s node %s: %s", rt_role_name(nd->role), nd->name, c->msg);
}

int rt_forward(router *rt, int node, const uint8_t *req, size_t n, mp_buf *out, rt_err *e)
{
    uint8_t *resp = NULL;
    size_t rn = 0;
    int rc;
    const cfg_node *nd = &rt->cfg->nodes[node];

    if (!rt->dialed[node])
        return rt_errf(e, SX_EINTERNAL, "no connection to node %s", nd->name);
    if (!rt_conn_up(rt, node))
        return rt_errf(e, SX_EUNAVAIL, "%s node %s at %s: not connected (node down?)",
                       rt_role_name(nd->role), nd->name, nd->url);
    {
        net_job j;
        memset(&j, 0, sizeof(j));
        j.peer = rt->peers[node];
        j.solo = true; /* DDL: a catalog change, synced */
        j.req = req;
        j.req_n = n;
        rc = net_call_all(&j, 1, rt->timeout_ms);
        if (rc == 0)
            rc = j.err;
        resp = j.resp;
        rn = j.resp_n;
    }
    if (rc != 0)
        return rt_errf(e, rc, "%s node %s at %s: call failed (%s)", rt_role_name(nd->role),
                       nd->name, nd->url, sx_strerror(rc));
    mp_put_raw(out, resp, rn);
    free(resp);
    return out->oom ? rt_errf(e, SX_ENOMEM, "out of memory") : 0;
}
