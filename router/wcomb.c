/*
 * wcomb.c — PUTs combined per storage partition, without a fiber.
 *
 * The router's server offers every PUT to rt_defer on the nng thread that
 * received it. A PUT on the plain path (its table in the cached catalog
 * and the same as the frame's first combined PUT's, every item valid,
 * every storage node it needs connected, the batch within WC_MAX_ITEMS
 * items and WC_MAX_BYTES) is planned there into the thread's open batch;
 * once the received frame's requests have all been offered (a client's
 * MULTI carries dozens of PUTs), rt_defer_flush sends the batch as ONE
 * S_WRITE per storage partition, carrying the items of all its PUTs, each
 * PUT's items in order and the PUTs in the frame's order. When the last
 * S_WRITE of the batch has answered, each PUT is answered with its items'
 * versions, from that nng thread. So a frame of PUTs costs no fiber, and
 * the storage node decodes, queues and answers one request per partition
 * instead of one per PUT; the writes share a synced group there as before.
 * An S_WRITE carries the earliest deadline of its PUTs (msg.h, deadline_ms).
 * It goes to its partition's cached leader and, for a partition of several
 * replicas, walks the replicas as rt_rpc_run's calls do (leader.h), still
 * without a fiber: a replica that answers SX_ENOTLEADER, has no connection,
 * or never got it (its connection dropped, or stayed busy with a stalled
 * node, before it left) passes it on at once, from the thread that learnt
 * it; the pause after a cycle of replicas without success waits on an nng
 * timer. Each attempt waits at most RT_LW_WRITE_ATTEMPT_MS: an S_WRITE sent
 * and unanswered by then has an unknown outcome and fails at once
 * (rt_lw_unknown), its replica suspect for the next writes.
 * The walk gives up once rt->timeout_ms (but RT_LW_ATTEMPT_MIN_MS) has
 * passed since the first send; its PUTs then get the walk's error: nothing
 * of that S_WRITE was written, but they are not run again (their time is
 * spent).
 *
 * Anything else runs the ordinary handler (rt_h_put, on a fiber), which
 * gives every answer, message and retry it always has: a PUT declined at
 * the offer; and a PUT an S_WRITE of which failed in a way that proves
 * nothing of it was written (a stale catalog, an item the storage node
 * refused before writing, the S_WRITE's deadline passed, or no send at
 * all), handed back with net_reply_requeue and so run again alone (a PUT
 * that shared that S_WRITE with a refused item is then written alone, and
 * the refused one gets its own error), provided every S_WRITE carrying its
 * items failed that way, and, for a deadline, its own was later. A PUT some
 * of which may have been written (another of its S_WRITEs succeeded, or one
 * failed after it may have written: a timeout, a lost connection, a reply
 * that did not fit) is never run again: it gets the error its handler gives
 * for such a failure ("item F (with N item(s) for partition P) not written:
 * ..."), as a PUT alone whose partitions partly failed does; when the storage
 * node refused one of the PUT's own items, that item by its place in the PUT
 * ("item I: ... (storage node N, partition P)", as alone); when it refused
 * another PUT's item, saying so (the node's "operation K" counts the combined
 * S_WRITE, not this PUT).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "router.h"
#include "log.h"
#include "sx_errors.h"

/* One deferred PUT. */
typedef struct wc_put {
    net_reply *r;
    msg_PUT_req q;      /* decoded; its items point into the request */
    uint32_t base;      /* its first item's index in the batch's items */
    uint64_t *versions; /* per item, filled from the S_WRITE replies */
    atomic_bool failed; /* an S_WRITE carrying one of its items failed */
} wc_put;

/* One item of the batch: its PUT, its place there, its partition index. */
typedef struct wc_item {
    uint32_t put, item;
    int g;
} wc_item;

typedef struct wc_batch wc_batch;

/* One S_WRITE of a batch: the items of partition index g, in batch order. */
typedef struct wc_call {
    wc_batch *b;
    int g;
    uint32_t n;
    uint32_t *of;        /* per operation: its index in b->items */
    mp_buf req;          /* the encoded request (sent from here) */
    int node;            /* the node it went to (last) */
    rt_lwalk w;          /* its way through the partition's replicas */
    uint64_t start, end; /* when it was first sent; when its walk gives up */
    uint64_t sent_at;    /* when its last attempt was sent */
    bool unsent;         /* that attempt failed before it left (a walked
                          * call asks its link: net_peer_call.unsent) */
    nng_aio *pause;      /* a walk's pause between cycles (NULL: none yet) */
    int err;             /* its failure (0: none) */
    bool rerun;          /* nothing of it was written: its PUTs may run again */
    bool no_leader;      /* its walk gave up (msg: rt_lw_giveup's) */
    uint64_t deadline;   /* the deadline it carried (rt_write_deadline) */
    char msg[RT_ERRLEN]; /* what failed */
} wc_call;

/* The PUTs of one received frame for one table. */
struct wc_batch {
    router *rt;
    const cat_catalog *cat;
    const cat_table *t;
    wc_put *puts;
    uint32_t nputs, capputs;
    wc_item *items;
    uint32_t nitems, capitems;
    size_t bytes; /* the items' bytes (bounded: WC_MAX_BYTES) */
    wc_call *calls;
    int ncalls;
    atomic_int left; /* calls not yet answered */
};

/* A batch's items stay well within one S_WRITE frame, and its replies
 * (versions and flags, ~20 bytes an item) within one reply frame; a PUT
 * that would take it further runs the ordinary way. */
#define WC_MAX_BYTES (SX_MAX_FRAME / 2)
#define WC_MAX_ITEMS 8192u

/* The batch the frame being offered on this thread builds (NULL: none). */
static __thread wc_batch *tl_batch;

/* Frees b and every PUT's decoded request (not the replies: sent or
 * requeued before). */
static void batch_free(wc_batch *b)
{
    for (uint32_t i = 0; i < b->nputs; i++) {
        msg_free_req(MSG_PUT, &b->puts[i].q);
        free(b->puts[i].versions);
    }
    for (int c = 0; b->calls && c < b->ncalls; c++) {
        free(b->calls[c].of);
        mp_buf_free(&b->calls[c].req);
        if (b->calls[c].pause != NULL)
            nng_aio_reap(b->calls[c].pause); /* this may be its callback */
    }
    free(b->calls);
    free(b->puts);
    free(b->items);
    free(b);
}

/* Grows array *v of *cap elements of size sz to hold need; false: no
 * memory. */
static bool grow(void **v, uint32_t *cap, uint32_t need, size_t sz)
{
    if (need <= *cap)
        return true;
    uint32_t ncap = *cap ? *cap * 2 : 32;
    while (ncap < need)
        ncap *= 2;
    void *nv = realloc(*v, (size_t)ncap * sz);
    if (nv == NULL)
        return false;
    *v = nv;
    *cap = ncap;
    return true;
}

/* Whether call c carries an item of PUT w. */
static bool call_has(const wc_batch *b, const wc_put *w, const wc_call *c)
{
    for (uint32_t i = 0; i < w->q.items.n; i++)
        if (b->items[w->base + i].g == c->g)
            return true;
    return false;
}

/* Whether call c was refused past a deadline no later than PUT w's own:
 * run alone, w would be refused again. */
static bool own_deadline(const wc_put *w, const wc_call *c)
{
    return c->err == SX_EDEADLINE && w->q.deadline_ms != 0 && w->q.deadline_ms <= c->deadline;
}

/* Answers PUT w (index p of b), some S_WRITE of which failed. When every
 * S_WRITE carrying its items failed in a way that proves nothing was
 * written, it runs again alone, unless one was refused past a deadline no
 * later than its own (alone it would be refused again): it gets that
 * error. Otherwise some of it may have been written (another of its
 * S_WRITEs succeeded, or one failed after it may have written), so it is
 * never run again: it gets the error of the first such failed partition,
 * in partition order as rt_h_put would, else of the first refused one. */
static void put_failed(wc_batch *b, uint32_t p)
{
    wc_put *w = &b->puts[p];
    const wc_call *bad = NULL, *refused = NULL;
    bool written = false;

    for (int k = 0; k < b->ncalls; k++) {
        const wc_call *c = &b->calls[k];
        if (!call_has(b, w, c))
            continue;
        if (c->err == 0)
            written = true;
        else if ((!c->rerun || own_deadline(w, c)) && bad == NULL)
            bad = c;
        else if (c->rerun && refused == NULL)
            refused = c;
    }
    if (bad == NULL && (!written || refused == NULL)) {
        atomic_fetch_add_explicit(&b->rt->comb_reruns, 1, memory_order_relaxed);
        net_reply_requeue(w->r);
        return;
    }
    if (bad == NULL)
        bad = refused;
    long first = -1;
    uint32_t cnt = 0;
    for (uint32_t i = 0; i < w->q.items.n; i++) {
        if (b->items[w->base + i].g != bad->g)
            continue;
        if (first < 0)
            first = (long)i;
        cnt++;
    }
    rt_rpc rc = {
        .node = bad->node, .type = MSG_S_WRITE, .err = bad->err, .no_leader = bad->no_leader
    };
    rt_err e;
    mp_buf out;
    unsigned long k;
    const char *why;

    /* "operation K" counts the combined S_WRITE's operations: name the
     * PUT's own item, or say that another PUT's item was refused */
    bool op = rt_op_error(bad->msg, &k, &why) && k < bad->n;

    if (op && b->items[bad->of[k]].put == p) {
        rt_put_refused(b->rt, bad->g, bad->node, bad->err, (long)b->items[bad->of[k]].item, why,
                       &e);
    } else {
        if (op)
            snprintf(rc.msg, sizeof(rc.msg),
                     "another request's item in the same combined "
                     "write was refused: %s",
                     why);
        else
            snprintf(rc.msg, sizeof(rc.msg), "%s", bad->msg);
        rt_put_unwritten(b->rt, bad->g, &rc, first, cnt, &e);
    }
    atomic_fetch_add_explicit(&b->rt->nreq, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&b->rt->nerr, 1, memory_order_relaxed);
    mp_buf_init(&out);
    if (msg_encode_err(MSG_PUT, bad->err, e.msg, &out) != 0 || out.oom)
        LOG_ERROR("router: cannot encode an error reply to PUT");
    net_reply_send(w->r, &out);
}

/* Answers every PUT of b (with its versions, or see put_failed) and frees
 * b. */
static void batch_finish(wc_batch *b)
{
    for (uint32_t i = 0; i < b->nputs; i++) {
        wc_put *w = &b->puts[i];
        mp_buf out;
        msg_PUT_rep rep;

        if (atomic_load(&w->failed)) {
            put_failed(b, i);
            continue;
        }
        memset(&rep, 0, sizeof(rep));
        rep.versions = (msg_u64s){ w->q.items.n, w->versions };
        mp_buf_init(&out);
        if (msg_encode_rep(MSG_PUT, &rep, &out) != 0 || out.oom) {
            mp_buf_free(&out);
            mp_buf_init(&out);
            if (msg_encode_err(MSG_PUT, SX_ENOMEM, "out of memory encoding the reply", &out) != 0 ||
                out.oom)
                LOG_ERROR("router: cannot encode an error reply to PUT");
            atomic_fetch_add_explicit(&b->rt->nerr, 1, memory_order_relaxed);
        } else {
            atomic_fetch_add_explicit(&b->rt->comb_puts, 1, memory_order_relaxed);
        }
        atomic_fetch_add_explicit(&b->rt->nreq, 1, memory_order_relaxed);
        net_reply_send(w->r, &out);
    }
    batch_free(b);
}

/* Marks every PUT with an item in call c failed. */
static void call_fail(wc_call *c)
{
    for (uint32_t k = 0; k < c->n; k++)
        atomic_store(&c->b->puts[c->b->items[c->of[k]].put].failed, true);
}

/* Whether a storage node's error reply to an S_WRITE proves that nothing
 * of it was written: a stale catalog, a deadline passed (the batch's
 * earliest: its other PUTs may still be in time alone), a replica that is
 * not the partition's leader, or an operation refused while the request
 * was checked ("operation K: ..."), all before any write. */
static bool unwritten(int err, const char *msg)
{
    return err == SX_ESTALECAT || err == SX_EDEADLINE || err == SX_ENOTLEADER ||
           strncmp(msg, "operation ", 10) == 0;
}

/* Call c is over (answered, or failed for good): the last one of its batch
 * answers the batch. */
static void call_end(wc_call *c)
{
    wc_batch *b = c->b;

    if (c->err != 0)
        call_fail(c);
    if (atomic_fetch_sub(&b->left, 1) == 1)
        batch_finish(b);
}

/* What a walk's step left call c to do. */
typedef enum wc_next { WC_END, WC_SEND, WC_PAUSED } wc_next;

static void call_send(wc_call *c);

/* A walk's pause is over: the call goes to its next replica. */
static void pause_done(void *arg)
{
    call_send(arg);
}

/* Call c's attempt at c->node ended (c->err, c->msg; hint: an
 * SX_ENOTLEADER's; how: leader.h), at now: its walk (leader.h) decides.
 * WC_SEND: send it now to c->node (the next replica); WC_PAUSED: it will
 * be, once the pause has passed; WC_END: the result stands (a success; the
 * walk's give-up when its time is spent; the attempt's own failure
 * otherwise, "outcome unknown" when it went unanswered). */
static wc_next walk_on(wc_call *c, uint64_t hint, rt_lhow how, uint64_t now)
{
    router *rt = c->b->rt;

    if (rt_lw_next(&c->w, c->err, hint, how, now) == RT_LW_DONE) {
        if (c->err != 0 && rt_lw_unknown_outcome(&c->w, how))
            rt_lw_unknown(c->err, (int)(now - c->sent_at), c->msg, sizeof(c->msg));
        return WC_END;
    }
    now = rt_now_ms();
    if (now + (uint64_t)c->w.pause_ms + RT_LW_ATTEMPT_MIN_MS > c->end ||
        atomic_load(&rt->stopping)) {
        rt_rpc last = { .node = c->node, .type = MSG_S_WRITE, .err = c->err };
        rt_err why;

        snprintf(last.msg, sizeof(last.msg), "%s", c->msg);
        rt_rpc_fail(rt, &last, &why);
        c->err = rt_lw_giveup(&c->w, c->err, why.msg, now - c->start, c->msg, sizeof(c->msg));
        c->no_leader = true;
        c->rerun = false; /* its time is spent: not again alone */
        return WC_END;
    }
    c->err = 0;
    c->msg[0] = '\0';
    c->rerun = false;
    c->node = c->w.node;
    if (c->w.pause_ms == 0)
        return WC_SEND;
    if (c->pause == NULL && nng_aio_alloc(&c->pause, pause_done, c) != 0) {
        c->err = SX_ENOMEM;
        snprintf(c->msg, sizeof(c->msg), "out of memory");
        c->rerun = true; /* not sent: its PUTs may run alone */
        return WC_END;
    }
    nng_sleep_aio((nng_duration)c->w.pause_ms, c->pause);
    return WC_PAUSED;
}

/* An S_WRITE of the batch answered (or failed): its versions go to their
 * PUTs, or, when its walk goes on, it is sent to another replica; once
 * over, the last one answers the batch. */
static void call_done(void *arg, int err, const uint8_t *resp, size_t n)
{
    wc_call *c = arg;
    wc_batch *b = c->b;
    msg_S_WRITE_rep rep;
    uint64_t hint = 0, now = rt_now_ms();
    rt_lhow how = err == 0 ? RT_LH_ANSWERED : c->unsent ? RT_LH_UNSENT : RT_LH_LOST;

    memset(&rep, 0, sizeof(rep));
    rt_leader_seen(&b->rt->leaders, c->node, how, now);
    if (err != 0 && c->unsent) {
        c->err = err;
        snprintf(c->msg, sizeof(c->msg), "not sent: %s (node down or stalled?)", sx_strerror(err));
    } else if (err != 0) {
        c->err = err;
        snprintf(c->msg, sizeof(c->msg), "call failed (%s)", sx_strerror(err));
    } else if ((c->err = msg_decode_rep(MSG_S_WRITE, resp, n, &rep, c->msg, sizeof(c->msg))) != 0) {
        if (c->msg[0] == '\0')
            snprintf(c->msg, sizeof(c->msg), "%s", sx_strerror(c->err));
        c->rerun = unwritten(c->err, c->msg);
        if (c->err == SX_ENOTLEADER)
            hint = msg_err_hint(resp, n);
    } else if (rep.versions.n != c->n) {
        c->err = SX_EPROTO;
        snprintf(c->msg, sizeof(c->msg), "partition %llu answered %u versions for %u items",
                 (unsigned long long)b->rt->cfg->storage[c->g].id, rep.versions.n, c->n);
    } else {
        for (uint32_t k = 0; k < c->n; k++) {
            const wc_item *it = &b->items[c->of[k]];
            b->puts[it->put].versions[it->item] = rep.versions.v[k];
        }
    }
    msg_free_rep(MSG_S_WRITE, &rep);
    if (c->w.walks) {
        wc_next next = walk_on(c, hint, how, now);
        if (next == WC_SEND)
            call_send(c);
        if (next != WC_END)
            return;
    }
    call_end(c);
}

/* Sends call c to c->node. A replica without a connection is passed over
 * as the walk says (and the call ends there when it says so). A walked
 * call's attempt is bounded (rt_lw_attempt_ms) and asks its link whether
 * it was sent. */
static void call_send(wc_call *c)
{
    router *rt = c->b->rt;
    int timeout = rt->timeout_ms, rc;
    net_peer_call pc;

    for (;;) {
        if (!c->w.walks)
            break;
        uint64_t now = rt_now_ms();
        timeout = rt_lw_attempt_ms(&c->w, now < c->end ? (int)(c->end - now) : 1);
        if (net_peer_connected(rt->peers[c->node]))
            break;
        c->err = SX_EUNAVAIL;
        snprintf(c->msg, sizeof(c->msg), "not connected (node down?)");
        rt_leader_seen(&rt->leaders, c->node, RT_LH_UNSENT, now);
        wc_next next = walk_on(c, 0, RT_LH_UNSENT, now);
        if (next == WC_SEND)
            continue;
        if (next == WC_END)
            call_end(c);
        return;
    }
    c->unsent = false;
    c->sent_at = rt_now_ms();
    pc = (net_peer_call){ .req = (const uint8_t *)c->req.sb.data,
                          .n = c->req.sb.size,
                          .done = call_done,
                          .arg = c,
                          .unsent = c->w.walks ? &c->unsent : NULL };
    rc = net_peer_submit_n(rt->peers[c->node], &pc, 1, timeout);
    if (rc != 0) { /* not sent: its PUTs may run alone */
        c->rerun = true;
        c->err = rc;
        snprintf(c->msg, sizeof(c->msg), "call failed (%s)", sx_strerror(rc));
        call_end(c);
    } else {
        atomic_fetch_add_explicit(&rt->comb_writes, 1, memory_order_relaxed);
    }
}

/* Builds the batch's S_WRITEs, one per partition with items. Returns
 * false when out of memory. */
static bool batch_calls(wc_batch *b)
{
    router *rt = b->rt;
    int nst = rt->cfg->nstorage;
    uint32_t *cnt = calloc((size_t)nst, sizeof(*cnt));
    int *call_of = malloc((size_t)nst * sizeof(*call_of));
    bool ok = cnt != NULL && call_of != NULL;

    for (uint32_t i = 0; ok && i < b->nitems; i++)
        cnt[b->items[i].g]++;
    if (ok)
        b->calls = calloc((size_t)nst, sizeof(*b->calls));
    ok = ok && b->calls != NULL;
    for (int g = 0; ok && g < nst; g++) {
        call_of[g] = -1;
        if (cnt[g] == 0)
            continue;
        wc_call *c = &b->calls[b->ncalls];
        c->b = b;
        c->g = g;
        c->node = rt->cfg->storage[g].node; /* until it is sent */
        mp_buf_init(&c->req);
        c->of = malloc(cnt[g] * sizeof(*c->of));
        call_of[g] = b->ncalls++;
        ok = c->of != NULL;
    }
    for (uint32_t i = 0; ok && i < b->nitems; i++) {
        wc_call *c = &b->calls[call_of[b->items[i].g]];
        c->of[c->n++] = i;
    }
    for (int k = 0; ok && k < b->ncalls; k++) {
        wc_call *c = &b->calls[k];
        mp_span *objs = malloc(c->n * sizeof(*objs));
        uint64_t *dels = calloc(c->n, sizeof(*dels));
        msg_S_WRITE_req q;

        ok = objs != NULL && dels != NULL;
        for (uint32_t j = 0; ok && j < c->n; j++) {
            const wc_item *it = &b->items[c->of[j]];
            objs[j] = b->puts[it->put].q.items.v[it->item];
        }
        if (ok) {
            uint64_t first = 0;
            memset(&q, 0, sizeof(q));
            for (uint32_t j = 0; j < c->n; j++) {
                uint64_t d = b->puts[b->items[c->of[j]].put].q.deadline_ms;
                if (d != 0 && (first == 0 || d < first))
                    first = d;
            }
            q.deadline_ms = c->deadline = rt_write_deadline(rt, first);
            q.part = rt->cfg->storage[c->g].id;
            q.catver = b->cat->version;
            q.table_id = b->t->id;
            q.dels = (msg_u64s){ c->n, dels };
            q.objs = (msg_spans){ c->n, objs };
            ok = msg_encode_req(MSG_S_WRITE, &q, &c->req) == 0 && !c->req.oom &&
                 c->req.sb.size <= NET_REQ_MAX;
        }
        free(objs);
        free(dels);
    }
    free(cnt);
    free(call_of);
    return ok;
}

void rt_defer_flush(void *arg)
{
    wc_batch *b = tl_batch;

    (void)arg;
    tl_batch = NULL;
    if (b == NULL)
        return;
    if (!batch_calls(b)) { /* nothing sent: every PUT runs alone */
        for (uint32_t i = 0; i < b->nputs; i++)
            atomic_store(&b->puts[i].failed, true);
        for (int k = 0; k < b->ncalls; k++) {
            b->calls[k].err = SX_ENOMEM;
            b->calls[k].rerun = true;
        }
        batch_finish(b);
        return;
    }
    /* one count for this loop: the batch is not finished before it ends */
    atomic_store(&b->left, b->ncalls + 1);
    for (int k = 0; k < b->ncalls; k++) {
        wc_call *c = &b->calls[k];

        c->start = rt_now_ms();
        rt_lw_start(&c->w, &b->rt->leaders, &b->rt->cfg->storage[c->g], true, c->start);
        c->node = c->w.node;
        c->end = c->start + (uint64_t)b->rt->timeout_ms;
        call_send(c);
    }
    if (atomic_fetch_sub(&b->left, 1) == 1)
        batch_finish(b);
}

/* Plans PUT q (decoded from the frame) into the thread's batch: true when
 * taken, false to leave it to the ordinary handler (q untouched). */
static bool batch_add(router *rt, msg_PUT_req *q, net_reply *r)
{
    const cat_catalog *cat;
    const cat_table *t;
    wc_batch *b = tl_batch;
    rt_err e;

    if (q->items.n == 0 || catcache_peek(rt->cc, 0, &cat) != 0 || cat == NULL)
        return false;
    t = cat_table_by_name(cat, (const char *)q->table.p, q->table.n);
    if (t == NULL || (b != NULL && (b->cat != cat || b->t != t)))
        return false;
    if (b == NULL) {
        b = calloc(1, sizeof(*b));
        if (b == NULL)
            return false;
        b->rt = rt;
        b->cat = cat;
        b->t = t;
        tl_batch = b; /* rt_defer frees it again if this PUT is declined */
    }
    size_t bytes = 0;
    for (uint32_t i = 0; i < q->items.n; i++)
        bytes += q->items.v[i].n;
    if (bytes > WC_MAX_BYTES - b->bytes || q->items.n > WC_MAX_ITEMS - b->nitems)
        return false;
    if (!grow((void **)&b->puts, &b->capputs, b->nputs + 1, sizeof(*b->puts)) ||
        !grow((void **)&b->items, &b->capitems, b->nitems + q->items.n, sizeof(*b->items)))
        return false;
    uint32_t p = b->nputs;
    for (uint32_t i = 0; i < q->items.n; i++) {
        wc_item *it = &b->items[b->nitems + i];
        it->put = p;
        it->item = i;
        if (rt_put_place(rt, t, &q->items.v[i], i, &it->g, &e) != 0 ||
            !net_peer_connected(rt->peers[rt_leader_get(&rt->leaders, &rt->cfg->storage[it->g])]))
            return false;
    }
    uint64_t *v = calloc(q->items.n, sizeof(*v));
    if (v == NULL)
        return false;
    wc_put *w = &b->puts[p];
    w->r = r;
    w->q = *q;
    w->base = b->nitems;
    w->versions = v;
    atomic_init(&w->failed, false);
    b->nputs++;
    b->nitems += q->items.n;
    b->bytes += bytes;
    return true;
}

bool rt_defer(void *arg, msg_type t, const uint8_t *p, size_t n, net_reply *r)
{
    router *rt = arg;
    msg_PUT_req q;

    if (t != MSG_PUT || msg_decode_req(MSG_PUT, p, n, &q) != 0)
        return false;
    if (!batch_add(rt, &q, r)) {
        msg_free_req(MSG_PUT, &q);
        if (tl_batch != NULL && tl_batch->nputs == 0) {
            batch_free(tl_batch); /* made for this PUT: no frame left holding it */
            tl_batch = NULL;
        }
        return false;
    }
    return true;
}
