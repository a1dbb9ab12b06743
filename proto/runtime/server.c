/*
 * server.c — the request server every daemon runs (see net.h).
 *
 * A fixed set of REP contexts ("slots") receive through aio callbacks and
 * push each request onto one job queue; a pool of worker threads runs the
 * handler and starts the reply's send without waiting for it (the slot's
 * callback re-arms the receive when the send is done). A worker therefore
 * sleeps only when there is no work, not once per receive and once per send.
 *
 * A MULTI request (several whole frames, see msg.h) becomes one job per
 * inner frame, run concurrently by the pool; the worker that finishes the
 * last one sends the MULTI reply, one reply frame per request, in order.
 * Requests the daemon calls quick (short local reads) run at once on the
 * nng thread that received them, one after another: no worker wakes up.
 * Requests the daemon defers (writes that wait for a group commit, the
 * router's PUTs) are handed over on that thread too, and answered later by
 * the daemon through net_reply_send: no worker sleeps through them. Once a
 * received frame's requests have all been offered, the daemon's
 * defer_flush runs on that thread (when it took any), so that it can send
 * what it gathered from the frame; a taken request it will not answer
 * itself goes back to the workers with net_reply_requeue.
 *
 * A request can also come from this very process (net_server_call_local:
 * a router hosted by a storage node calling that node): it is dispatched
 * the same way on the caller's thread, and its reply goes to the caller's
 * completion function instead of a socket.
 *
 * nng 1.5.2 can lose a REP reply: rep0_pipe_close stops the pipe's send
 * aio before it removes the pipe from the socket, so a reply sent in that
 * window is handed to a stopped aio, which refuses it without a callback,
 * and rep0_pipe_fini frees only the receive aio's message. Such a reply
 * (its client has gone) is never freed. It happens when a client closes
 * its connection just as its reply leaves (integration.partition, whose
 * loads time out while a storage node is cut off, meets it in about one
 * run of ten under LeakSanitizer). Making each reply its own
 * message (reply_msg_new) lets the ASan build's default suppressions name
 * exactly these; a long-running router loses a few hundred bytes per such
 * race.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "fiber.h"
#include "link.h"
#include "net.h"
#include "msg.h"
#include "log.h"
#include "sx_errors.h"

typedef struct srv_slot srv_slot;

/* Where a request came from, and so where its reply goes: a REP context's
 * message, a link's frame, or a call from this process. */
typedef struct srv_src {
    srv_slot *slot; /* REP: the context */
    nng_msg *msg;
    link_conn *link; /* link: the connection (one reference held) */
    uint64_t id;     /* the request's id */
    uint8_t *frame;  /* link: its bytes (owned); in-process: borrowed */
    size_t n;
    net_done_fn ldone; /* in-process: the caller's completion (else NULL) */
    void *larg;
} srv_src;

/* One MULTI request in progress; its block also holds its jobs and replies. */
typedef struct srv_batch {
    struct net_server *srv;
    srv_src src; /* the request; inner frames point into it */
    uint32_t n;
    atomic_uint left;    /* jobs not finished yet, + 1 while batch_start runs */
    atomic_bool dropped; /* a job was dropped (stopping): no reply at all */
    mp_buf *replies;     /* n, one per inner frame */
} srv_batch;

typedef struct srv_job {
    struct srv_job *next;
    struct srv_job *chain; /* quick frames of the same batch, run after */
    struct net_server *srv;
    srv_src src;      /* a single request: where it came from */
    srv_batch *batch; /* or inner frame i of a batch */
    uint32_t i;
    const uint8_t *p;
    size_t n;
} srv_job;

struct srv_slot {
    net_server *srv;
    nng_ctx ctx;
    nng_aio *aio;
    int sending; /* the aio carries a reply (else a receive) */
};

/* deferred: requests handed over and not yet answered; DEFER_CLOSED is set
 * once the server stops taking more. */
#define DEFER_CLOSED (1u << 31)

struct net_server {
    nng_socket sock;
    net_handler handler;
    net_quick_fn quick;
    net_defer_fn defer;
    net_defer_flush_fn defer_flush;
    atomic_uint deferred;
    atomic_int sends;       /* replies whose send has not completed */
    pthread_cond_t drained; /* deferred or sends reached 0 (with mu) */
    void *arg;
    fib_pool *pool; /* fiber mode: jobs run here, not on threads */
    pthread_t *threads;
    int started;
    srv_slot *slots;
    int nslots;
    bool rep;             /* serves a REP socket (sock) */
    link_listener *links; /* or links accepted here */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_job *head, *tail;
    int stopping;
    atomic_bool closing; /* stopping, readable without mu */
};

static void slot_recv(srv_slot *s)
{
    s->sending = 0;
    nng_ctx_recv(s->ctx, s->aio);
}

/* A new message holding out's bytes, or NULL (out of memory). Not inlined:
 * LeakSanitizer's suppressions below name it (see the header). */
__attribute__((noinline)) static nng_msg *reply_msg_new(const mp_buf *out)
{
    nng_msg *m = NULL;

    if (!out->oom)
        (void)net_msg_copy(&m, out->sb.data, out->sb.size);
    return m;
}

/* Read by LeakSanitizer at exit in the ASan build (a weak hook of its
 * runtime; unused otherwise): the replies nng 1.5.2 loses (the header). */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
    return "leak:reply_msg_new\n";
}

/* Sends out as the reply on s, and frees request req; on failure drops the
 * request (the caller times out) and listens again. Frees out. */
static void slot_reply(srv_slot *s, nng_msg *req, mp_buf *out)
{
    nng_msg *m = reply_msg_new(out);

    nng_msg_free(req);
    mp_buf_free(out);
    if (m == NULL) {
        LOG_ERROR("reply dropped: out of memory");
        slot_recv(s);
        return;
    }
    s->sending = 1;
    atomic_fetch_add(&s->srv->sends, 1);
    nng_aio_set_msg(s->aio, m);
    nng_ctx_send(s->ctx, s->aio);
}

/* True when o's bytes are in frame..n (a link's, or an in-process call's),
 * not in a REP message. */
static bool src_framed(const srv_src *o)
{
    return o->link != NULL || o->ldone != NULL;
}

static const uint8_t *src_body(const srv_src *o)
{
    return src_framed(o) ? o->frame : nng_msg_body(o->msg);
}

static size_t src_len(const srv_src *o)
{
    return src_framed(o) ? o->n : nng_msg_len(o->msg);
}

/* Forgets request o unanswered (an in-process caller is told SX_EUNAVAIL:
 * its completion runs exactly once). */
static void src_drop(srv_src *o)
{
    if (o->ldone != NULL) {
        o->ldone(o->larg, SX_EUNAVAIL, NULL, 0);
        return;
    }
    if (o->link == NULL) {
        nng_msg_free(o->msg);
        return;
    }
    free(o->frame);
    link_release(o->link);
    link_unref(o->link);
}

/* Sends out (whose bytes it takes) as o's reply, and lets o go. A link
 * that closed meanwhile has nobody to answer; a reply too large for a
 * frame becomes an SX_ETOOBIG error reply. */
static void src_reply(srv_src *o, mp_buf *out)
{
    int rc;

    if (o->ldone != NULL) {
        if (out->oom)
            o->ldone(o->larg, SX_ENOMEM, NULL, 0);
        else
            o->ldone(o->larg, 0, (const uint8_t *)out->sb.data, out->sb.size);
        mp_buf_free(out);
        return;
    }
    if (o->link == NULL) {
        slot_reply(o->slot, o->msg, out);
        return;
    }
    rc = out->oom ? SX_ENOMEM
                  : link_send(o->link, o->id, (const uint8_t *)out->sb.data, out->sb.size);
    mp_buf_free(out);
    if (rc == SX_ENOMEM || rc == SX_ETOOBIG) {
        msg_type t = MSG_MULTI;
        int is_reply = 0;
        mp_buf e;

        if (msg_peek(o->frame, o->n, &t, &is_reply) != 0)
            t = MSG_MULTI;
        mp_buf_init(&e);
        msg_encode_err(t, rc,
                       rc == SX_ETOOBIG ? "the reply is larger than a frame" : "out of memory", &e);
        if (e.oom || link_send(o->link, o->id, (const uint8_t *)e.sb.data, e.sb.size) != 0)
            LOG_ERROR("reply dropped: %s", sx_strerror(rc));
        mp_buf_free(&e);
    }
    src_drop(o);
}

static void run_job(void *arg);
static void drop_job(void *arg);
static void queue_push(net_server *srv, srv_job *first, srv_job *last, uint32_t count);
static void fail_job(srv_job *j, int err, const char *why);
static void job_done(srv_job *j, mp_buf *out);
static void batch_release(srv_batch *b);

/* Counts a deferral out. Once the server is stopping (DEFER_CLOSED, set
 * under mu), only under mu: the stopping thread frees srv as soon as it
 * sees 0, so nothing may touch srv after a decrement it can see. */
static void defer_release(net_server *srv)
{
    unsigned v = atomic_load(&srv->deferred);

    while (!(v & DEFER_CLOSED))
        if (atomic_compare_exchange_weak(&srv->deferred, &v, v - 1))
            return;
    pthread_mutex_lock(&srv->mu);
    if ((atomic_fetch_sub(&srv->deferred, 1) & ~DEFER_CLOSED) == 1)
        pthread_cond_broadcast(&srv->drained);
    pthread_mutex_unlock(&srv->mu);
}

/* Offers job j to the daemon's defer function; true if it took it. */
static bool try_defer(net_server *srv, msg_type t, srv_job *j)
{
    if (srv->defer == NULL)
        return false;
    /* counted in before the offer: the reply may be sent before it returns */
    if (atomic_fetch_add(&srv->deferred, 1) & DEFER_CLOSED) {
        defer_release(srv);
        return false;
    }
    if (srv->defer(srv->arg, t, j->p, j->n, (net_reply *)j))
        return true;
    defer_release(srv); /* never taken */
    return false;
}

/* A received frame's requests have all been offered (see defer_flush). */
static void defer_flushed(net_server *srv)
{
    if (srv->defer_flush != NULL)
        srv->defer_flush(srv->arg);
}

/* A link's burst (frames read together) is offered frame by frame on one
 * thread; the daemon's defer_flush runs once, after its last frame, when
 * the defer function took any of them: this names the server then. */
static __thread net_server *tl_flush_due;

/* The defer function took a request of the frame being offered: flushes
 * now, or (flush false: more frames of a link's burst follow) after the
 * burst. */
static void defer_took(net_server *srv, bool flush)
{
    if (flush)
        defer_flushed(srv);
    else
        tl_flush_due = srv;
}

void net_reply_requeue(net_reply *r)
{
    srv_job *j = (srv_job *)r;
    net_server *srv = j->srv;

    j->next = NULL;
    queue_push(srv, j, j, 1);
    defer_release(srv);
}

void net_reply_send(net_reply *r, mp_buf *out)
{
    srv_job *j = (srv_job *)r;
    net_server *srv = j->srv;

    job_done(j, out);
    mp_buf_init(out);
    defer_release(srv);
}

/* Appends jobs first..last to the queue and wakes up to count workers; in
 * fiber mode, hands each to the pool. */
static void queue_push(net_server *srv, srv_job *first, srv_job *last, uint32_t count)
{
    if (srv->pool != NULL) {
        pthread_mutex_lock(&srv->mu); /* the pool lives while !stopping */
        for (srv_job *j = first, *next; j != NULL; j = next) {
            next = j == last ? NULL : j->next;
            j->next = NULL;
            if (srv->stopping) {
                fail_job(j, SX_EUNAVAIL, "the server is stopping");
            } else if (fib_pool_submit(srv->pool, run_job, j) != 0) {
                LOG_ERROR("request refused: out of memory");
                fail_job(j, SX_ENOMEM, "out of memory");
            }
        }
        pthread_mutex_unlock(&srv->mu);
        return;
    }
    pthread_mutex_lock(&srv->mu);
    int stopping = srv->stopping;
    if (!stopping) {
        if (srv->tail)
            srv->tail->next = first;
        else
            srv->head = first;
        srv->tail = last;
    }
    pthread_mutex_unlock(&srv->mu);
    if (stopping) { /* no worker is left to run them: answer at once */
        for (srv_job *j = first, *next; j != NULL; j = next) {
            next = j == last ? NULL : j->next;
            j->next = NULL;
            fail_job(j, SX_EUNAVAIL, "the server is stopping");
        }
        return;
    }
    /* after unlocking: a woken worker does not block on the mutex */
    for (uint32_t i = 0; i < count; i++)
        pthread_cond_signal(&srv->cv);
}

/* Splits MULTI request src into jobs and queues them, except
 * the chain of quick frames, left in *quick_job for the caller to run.
 * Returns 0 (queued, or answered at once when empty or malformed) or
 * SX_ENOMEM. */
static int batch_start(net_server *srv, srv_src *src, bool flush, srv_job **quick_job)
{
    msg_MULTI_req rq;
    mp_buf out;
    int rc = msg_decode_req(MSG_MULTI, src_body(src), src_len(src), &rq);

    if (rc == 0 && rq.frames.n > NET_MULTI_MAX) {
        mp_buf_init(&out);
        msg_encode_err(MSG_MULTI, SX_EPROTO, "a MULTI holds at most 256 requests", &out);
        msg_free_req(MSG_MULTI, &rq);
        src_reply(src, &out);
        return 0;
    }
    if (rc != 0 || rq.frames.n == 0) {
        mp_buf_init(&out);
        if (rc != 0) {
            msg_encode_err(MSG_MULTI, rc, "malformed MULTI request", &out);
        } else {
            msg_MULTI_rep rep;
            memset(&rep, 0, sizeof(rep));
            msg_encode_rep(MSG_MULTI, &rep, &out);
        }
        msg_free_req(MSG_MULTI, &rq);
        src_reply(src, &out);
        return 0;
    }
    uint32_t n = rq.frames.n;
    size_t sz = sizeof(srv_batch) + n * sizeof(srv_job) + n * sizeof(mp_buf);
    srv_batch *b = malloc(sz);
    if (b == NULL) {
        msg_free_req(MSG_MULTI, &rq);
        return SX_ENOMEM;
    }
    srv_job *jobs = (srv_job *)(b + 1);
    srv_job *first = NULL, *last = NULL, *qlast = NULL;
    net_quick_fn quick = srv->quick;
    uint32_t queued = 0;
    bool took = false;
    b->srv = srv;
    b->src = *src;
    b->n = n;
    /* one more than the jobs: a deferred job may finish before the loop
     * below ends; the batch is not finished before this function says so */
    atomic_init(&b->left, n + 1);
    atomic_init(&b->dropped, false);
    b->replies = (mp_buf *)(jobs + n);
    for (uint32_t i = 0; i < n; i++) {
        srv_job *j = &jobs[i];
        msg_type t;
        int is_reply = 0;

        mp_buf_init(&b->replies[i]);
        memset(j, 0, sizeof(*j));
        j->srv = srv;
        j->batch = b;
        j->i = i;
        j->p = rq.frames.v[i].p;
        j->n = rq.frames.v[i].n;
        bool request = msg_peek(j->p, j->n, &t, &is_reply) == 0 && !is_reply && t != MSG_MULTI;
        if (request && quick && quick(t)) {
            /* quick frames ride one job, run one after another */
            if (qlast)
                qlast->chain = j;
            else
                *quick_job = j;
            qlast = j;
            continue;
        }
        if (request && try_defer(srv, t, j)) {
            took = true;
            continue;
        }
        if (last)
            last->next = j;
        else
            first = j;
        last = j;
        queued++;
    }
    msg_free_req(MSG_MULTI, &rq);
    if (took)
        defer_took(srv, flush);
    if (queued > 0)
        queue_push(srv, first, last, queued);
    batch_release(b);
    return 0;
}

/* Runs request src (taken) at once when quick, offers it to the daemon,
 * or queues it for the workers; a MULTI is split first. flush: see
 * defer_took. */
static void srv_dispatch(net_server *srv, srv_src *src, bool flush)
{
    msg_type t;
    int is_reply = 0;
    int peek = msg_peek(src_body(src), src_len(src), &t, &is_reply);

    if (peek == 0 && !is_reply && t == MSG_MULTI) {
        srv_job *quick = NULL;
        if (batch_start(srv, src, flush, &quick) == 0) {
            /* Quick frames (short local reads) run right here, on nng's
             * thread: no worker to wake for them. */
            if (quick != NULL)
                run_job(quick);
            return;
        }
    } else {
        srv_job *j = malloc(sizeof(*j));
        if (j != NULL) {
            memset(j, 0, sizeof(*j));
            j->srv = srv;
            j->src = *src;
            j->p = src_body(src);
            j->n = src_len(src);
            if (peek == 0 && !is_reply && srv->quick && srv->quick(t))
                run_job(j);
            else if (peek == 0 && !is_reply && try_defer(srv, t, j))
                defer_took(srv, flush);
            else
                queue_push(srv, j, j, 1);
            return;
        }
    }
    LOG_ERROR("request dropped: out of memory");
    srv_slot *slot = src->slot; /* NULL unless a REP context's */
    src_drop(src);
    if (slot != NULL)
        slot_recv(slot);
}

int net_server_call_local(net_server *srv, const uint8_t *req, size_t n, net_done_fn done,
                          void *arg)
{
    if (atomic_load(&srv->closing))
        return SX_EUNAVAIL;
    /* the frame is borrowed: the caller keeps it until done has run */
    srv_src src = { .frame = (uint8_t *)req, .n = n, .ldone = done, .larg = arg };
    srv_dispatch(srv, &src, true);
    return 0;
}

static void slot_cb(void *arg)
{
    srv_slot *s = arg;
    int rv = nng_aio_result(s->aio);

    if (s->sending) {
        net_server *srv = s->srv;
        if (rv != 0)
            nng_msg_free(nng_aio_get_msg(s->aio));
        nng_aio_set_msg(s->aio, NULL); /* sent (nng's) or freed */
        if (rv != NNG_ECLOSED && rv != NNG_ECANCELED && !atomic_load(&srv->closing))
            slot_recv(s); /* (a stopping server takes no new request) */
        /* a stopping server waits for its replies to leave (srv lives
         * until every slot's aio is stopped, which waits for this) */
        if (atomic_fetch_sub(&srv->sends, 1) == 1) {
            pthread_mutex_lock(&srv->mu);
            if (srv->stopping)
                pthread_cond_broadcast(&srv->drained);
            pthread_mutex_unlock(&srv->mu);
        }
        return;
    }
    if (rv == NNG_ECLOSED || rv == NNG_ECANCELED)
        return;
    if (rv != 0) {
        slot_recv(s);
        return;
    }
    srv_src src = { .slot = s, .msg = nng_aio_get_msg(s->aio) };
    nng_aio_set_msg(s->aio, NULL); /* ours now */
    srv_dispatch(s->srv, &src, true);
}

/* Room kept in a MULTI reply frame for its header and bin prefixes. */
#define BATCH_SLACK(n) (64u + 5u * (size_t)(n))

/* Keeps b's reply within the frame limit: the largest replies are replaced,
 * one by one, by SX_ETOOBIG error replies. A read's says NET_MULTI_UNFIT,
 * which tells the caller's peer to send it again alone (peer.c); a write's
 * (it ran, and must not run twice) is a plain error. */
static void batch_fit(srv_batch *b)
{
    size_t total = BATCH_SLACK(b->n);

    for (uint32_t i = 0; i < b->n; i++)
        total += b->replies[i].sb.size;
    while (total > SX_MAX_FRAME) {
        uint32_t big = 0;
        for (uint32_t i = 1; i < b->n; i++)
            if (b->replies[i].sb.size > b->replies[big].sb.size)
                big = i;
        mp_buf *r = &b->replies[big];
        msg_type t = MSG_MULTI;
        int is_reply = 0;
        total -= r->sb.size;
        if (msg_peek((const uint8_t *)r->sb.data, r->sb.size, &t, &is_reply) != 0)
            t = MSG_MULTI;
        mp_buf_free(r);
        mp_buf_init(r);
        msg_encode_err(t, SX_ETOOBIG,
                       msg_rerunnable(t)
                           ? NET_MULTI_UNFIT
                           : "the request ran, but its reply did not fit the MULTI frame",
                       r);
        total += r->sb.size;
    }
}

/* Encodes and sends the reply of finished batch b, then frees b. */
static void batch_finish(srv_batch *b)
{
    msg_MULTI_rep rep;
    mp_buf out;

    batch_fit(b);
    memset(&rep, 0, sizeof(rep));
    mp_buf_init(&out);
    rep.frames.v = malloc(b->n * sizeof(mp_span));
    if (rep.frames.v == NULL) {
        msg_encode_err(MSG_MULTI, SX_ENOMEM, "out of memory", &out);
    } else {
        rep.frames.n = b->n;
        for (uint32_t i = 0; i < b->n; i++) {
            rep.frames.v[i].p = (const uint8_t *)b->replies[i].sb.data;
            rep.frames.v[i].n = b->replies[i].sb.size;
        }
        msg_encode_rep(MSG_MULTI, &rep, &out);
        free(rep.frames.v);
    }
    for (uint32_t i = 0; i < b->n; i++)
        mp_buf_free(&b->replies[i]);
    src_reply(&b->src, &out);
    free(b);
}

/* Drops one of b's references (a job, or batch_start's own): the last one
 * sends the reply, or, when a job was dropped, frees b unanswered. */
static void batch_release(srv_batch *b)
{
    if (atomic_fetch_sub(&b->left, 1) != 1)
        return;
    if (!atomic_load(&b->dropped)) {
        batch_finish(b);
        return;
    }
    for (uint32_t i = 0; i < b->n; i++)
        mp_buf_free(&b->replies[i]);
    src_drop(&b->src);
    free(b);
}

/* Runs inner frame p..n of a batch into out; a nested MULTI is refused. */
static void batch_run_one(net_server *srv, const uint8_t *p, size_t n, mp_buf *out)
{
    msg_type t;
    int is_reply = 0;

    if (msg_peek(p, n, &t, &is_reply) == 0 && !is_reply && t == MSG_MULTI) {
        msg_encode_err(MSG_MULTI, SX_EPROTO, "a MULTI cannot hold a MULTI", out);
        return;
    }
    srv->handler(srv->arg, p, n, out);
}

/* Answers job j with out (whose bytes it takes): a single request's reply
 * goes out and j is freed; a batch frame's reply is kept, and the batch's
 * last one sends them all. */
static void job_done(srv_job *j, mp_buf *out)
{
    if (j->batch == NULL) {
        src_reply(&j->src, out);
        free(j);
        return;
    }
    srv_batch *b = j->batch;
    if (out->oom) {
        msg_type t = MSG_MULTI; /* typed as its request, so the caller reads it */
        int is_reply = 0;

        if (msg_peek(j->p, j->n, &t, &is_reply) != 0)
            t = MSG_MULTI;
        mp_buf_free(out);
        mp_buf_init(out);
        msg_encode_err(t, SX_ENOMEM, "out of memory", out);
    }
    b->replies[j->i] = *out; /* the reply's bytes move to b */
    batch_release(b);
}

/* Runs job j (a single request, or a batch job and its quick chain) and
 * sends what is due. */
static void run_job(void *arg)
{
    srv_job *j = arg;
    net_server *srv = j->srv;

    /* read each chain link before running: the last job to finish frees
     * the batch's block (and no link is left after it then) */
    for (srv_job *next; j != NULL; j = next) {
        mp_buf out;
        mp_buf_init(&out);
        next = j->chain;
        if (j->batch == NULL)
            srv->handler(srv->arg, j->p, j->n, &out);
        else
            batch_run_one(srv, j->p, j->n, &out);
        job_done(j, &out);
    }
}

/* Forgets job j unanswered (stopping, or out of memory): a batch's block
 * goes with its last job. */
static void drop_job(void *arg)
{
    srv_job *j = arg;

    for (srv_job *next; j != NULL; j = next) {
        next = j->chain;
        if (j->batch == NULL) {
            src_drop(&j->src);
            free(j);
        } else {
            atomic_store(&j->batch->dropped, true);
            batch_release(j->batch);
        }
    }
}

/* Answers job j (and its quick chain) with an error instead of running
 * it: a single request gets its error reply, a batch's frame its error
 * frame (the batch is finished as usual). */
static void fail_job(srv_job *j, int err, const char *why)
{
    for (srv_job *next; j != NULL; j = next) {
        mp_buf out;
        msg_type t = MSG_MULTI;
        int is_reply = 0;

        next = j->chain;
        mp_buf_init(&out);
        if (msg_peek(j->p, j->n, &t, &is_reply) != 0)
            t = MSG_MULTI;
        msg_encode_err(t, err, why, &out);
        if (j->batch == NULL) {
            src_reply(&j->src, &out);
            free(j);
            continue;
        }
        srv_batch *b = j->batch;
        b->replies[j->i] = out;
        batch_release(b);
    }
}

static void *worker(void *arg)
{
    net_server *srv = arg;

    os_thread_name("sx-worker");

    for (;;) {
        pthread_mutex_lock(&srv->mu);
        while (srv->head == NULL && !srv->stopping)
            pthread_cond_wait(&srv->cv, &srv->mu);
        if (srv->stopping) {
            pthread_mutex_unlock(&srv->mu);
            return NULL;
        }
        srv_job *j = srv->head;
        srv->head = j->next;
        if (srv->head == NULL)
            srv->tail = NULL;
        pthread_mutex_unlock(&srv->mu);
        run_job(j);
    }
}

int net_server_start(nng_socket sock, int nworkers, net_handler h, void *arg, net_server **out)
{
    net_server_opts o = { .workers = nworkers };

    return net_server_open(sock, &o, h, arg, out);
}

int net_server_start_q(nng_socket sock, int nworkers, net_handler h, net_quick_fn quick, void *arg,
                       net_server **out)
{
    net_server_opts o = { .workers = nworkers, .quick = quick };

    return net_server_open(sock, &o, h, arg, out);
}

/* A server's common part: its queue, and its workers or fiber pool, as o
 * says; no request source yet. Returns 0 or SX_ENOMEM. */
static int srv_new(const net_server_opts *o, net_handler h, void *arg, net_server **out)
{
    net_server *srv = calloc(1, sizeof(*srv));
    int nworkers = o->workers;

    if (srv == NULL)
        return SX_ENOMEM;
    if (nworkers < 1)
        nworkers = 1;
    srv->handler = h;
    srv->quick = o->quick;
    srv->defer = o->defer;
    srv->defer_flush = o->defer_flush;
    atomic_init(&srv->deferred, 0);
    atomic_init(&srv->sends, 0);
    atomic_init(&srv->closing, false);
    srv->arg = arg;
    if (pthread_mutex_init(&srv->mu, NULL) != 0) {
        free(srv);
        return SX_ENOMEM;
    }
    if (pthread_cond_init(&srv->cv, NULL) != 0) {
        pthread_mutex_destroy(&srv->mu);
        free(srv);
        return SX_ENOMEM;
    }
    if (pthread_cond_init(&srv->drained, NULL) != 0) {
        pthread_cond_destroy(&srv->cv);
        pthread_mutex_destroy(&srv->mu);
        free(srv);
        return SX_ENOMEM;
    }
    *out = srv; /* from here on, net_server_stop undoes what is done */
    srv->threads = calloc((size_t)nworkers, sizeof(pthread_t));
    if (srv->threads == NULL)
        return SX_ENOMEM;
    if (o->fibers > 0)
        return fib_pool_new(nworkers, o->fibers, NET_FIBER_STACK, &srv->pool) != 0 ? SX_ENOMEM : 0;
    for (int i = 0; i < nworkers; i++) {
        if (pthread_create(&srv->threads[i], NULL, worker, srv) != 0)
            return SX_ENOMEM;
        srv->started++;
    }
    return 0;
}

int net_server_open(nng_socket sock, const net_server_opts *o, net_handler h, void *arg,
                    net_server **out)
{
    net_server *srv = NULL;
    int nslots = o->slots > 0 ? o->slots : o->fibers > 0 ? o->fibers : o->workers;

    if (srv_new(o, h, arg, &srv) != 0)
        goto fail;
    srv->sock = sock;
    srv->rep = true;
    if (nslots < 1)
        nslots = 1;
    srv->slots = calloc((size_t)nslots, sizeof(srv_slot));
    if (srv->slots == NULL)
        goto fail;
    for (int i = 0; i < nslots; i++) {
        srv_slot *s = &srv->slots[i];
        s->srv = srv;
        if (nng_aio_alloc(&s->aio, slot_cb, s) != 0)
            goto fail;
        srv->nslots++;
        if (nng_ctx_open(&s->ctx, sock) != 0)
            goto fail;
        slot_recv(s);
    }
    *out = srv;
    return 0;
fail:
    net_server_stop(srv); /* (accepts NULL) */
    return SX_ENOMEM;
}

/* A frame received on one of a link server's links. */
static void link_frame(void *arg, link_conn *l, uint64_t id, uint8_t *frame, size_t n, bool more)
{
    net_server *srv = arg;
    srv_src src = { .link = l, .id = id, .frame = frame, .n = n };

    link_ref(l); /* src's, until its reply */
    link_hold(l);
    if (!atomic_load(&srv->closing)) {
        srv_dispatch(srv, &src, false);
    } else {
        mp_buf out;
        msg_type t = MSG_MULTI;
        int is_reply = 0;
        if (msg_peek(frame, n, &t, &is_reply) != 0)
            t = MSG_MULTI;
        mp_buf_init(&out);
        msg_encode_err(t, SX_EUNAVAIL, "the server is stopping", &out);
        src_reply(&src, &out);
    }
    if (!more && tl_flush_due == srv) {
        tl_flush_due = NULL;
        defer_flushed(srv);
    }
}

int net_server_open_link(const char *url, const net_server_opts *o, net_handler h, void *arg,
                         net_server **out)
{
    net_server *srv = NULL;
    int rc = srv_new(o, h, arg, &srv);

    if (rc == 0)
        rc = link_listen(url, link_frame, NULL, srv, NET_LINK_MAX_HELD, &srv->links);
    if (rc != 0) {
        if (srv != NULL)
            net_server_stop(srv);
        return rc;
    }
    *out = srv;
    return 0;
}

void net_server_stop(net_server *srv)
{
    if (srv == NULL)
        return;
    /* Workers finish the job in hand (its reply goes out on the live
     * socket) and leave; only then is the socket closed: a reply sent from
     * another thread while nng closes the socket can crash nng 1.5. */
    pthread_mutex_lock(&srv->mu);
    srv->stopping = 1;
    atomic_store(&srv->closing, true);
    atomic_fetch_or(&srv->deferred, DEFER_CLOSED); /* defer no more */
    pthread_cond_broadcast(&srv->cv);
    pthread_mutex_unlock(&srv->mu);
    for (int i = 0; i < srv->started; i++)
        pthread_join(srv->threads[i], NULL);
    fib_pool_free(srv->pool, drop_job); /* after its running jobs end */
    /* Deferred requests are answered on the live socket: the daemon must
     * still be completing them (it stops taking new work first). */
    pthread_mutex_lock(&srv->mu);
    while (atomic_load(&srv->deferred) & ~DEFER_CLOSED)
        pthread_cond_wait(&srv->drained, &srv->mu);
    if (srv->links != NULL) {
        /* the same for a link server's replies; then no frame arrives
         * and no reply leaves any more */
        pthread_mutex_unlock(&srv->mu);
        (void)link_listener_drain(srv->links, NET_STOP_SEND_WAIT_S * 1000);
        link_listener_close(srv->links);
        pthread_mutex_lock(&srv->mu);
    }
    /* Replies still queued behind another on their connection would be
     * cancelled by nng_aio_stop: let them leave, for a bounded time (a
     * peer that stopped reading must not hold the stop). */
    struct timespec dl; /* (drained uses the default, realtime, clock) */
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += NET_STOP_SEND_WAIT_S;
    while (atomic_load(&srv->sends) > 0 &&
           pthread_cond_timedwait(&srv->drained, &srv->mu, &dl) == 0)
        ;
    pthread_mutex_unlock(&srv->mu);
    /* Then the slots: a stopped aio's callback has returned (a quick job
     * in it finished) and it starts nothing more, so nothing sends while
     * nng closes the socket. A send it refused leaves its message. */
    for (int i = 0; i < srv->nslots; i++) {
        nng_aio_stop(srv->slots[i].aio);
        nng_msg *m = nng_aio_get_msg(srv->slots[i].aio);
        if (m != NULL)
            nng_msg_free(m);
        nng_aio_set_msg(srv->slots[i].aio, NULL);
    }
    if (srv->rep)
        nng_close(srv->sock);
    for (int i = 0; i < srv->nslots; i++)
        nng_aio_free(srv->slots[i].aio);
    /* Jobs nobody ran (a slot callback may have queued one after the
     * workers left). */
    while (srv->head != NULL) {
        srv_job *j = srv->head;
        srv->head = j->next;
        drop_job(j);
    }
    free(srv->slots);
    free(srv->threads);
    pthread_cond_destroy(&srv->drained);
    pthread_cond_destroy(&srv->cv);
    pthread_mutex_destroy(&srv->mu);
    free(srv);
}
