/*
 * peer.c — coalesced calls to one server (see net.h, net_peer).
 *
 * A peer owns a few REQ contexts ("carriers"), each with one aio whose
 * callback drives send → receive → deliver. A call goes out at once on an
 * idle carrier; when every carrier is busy it waits in the peer's queue, and
 * the next carrier to come back takes everything queued (up to a count and a
 * size) as one MULTI frame. So a lone call costs one plain round trip, and a
 * crowd of concurrent calls shares a few frames instead of a hop each. A
 * carrier whose lone call's reply finds nothing queued is idle again
 * before that call's callback runs, so the caller it wakes sends at once.
 *
 * A call's timeout runs from its submission: time spent queued counts, and
 * a frame's send and receive together wait only until the latest deadline
 * of the calls it carries. A queued call whose deadline passes fails with
 * SX_ETIMEDOUT without being sent: when a carrier takes it, or earlier by
 * the peer's timer, armed at the earliest deadline queued (a call queued
 * with an earlier deadline than the armed one cancels it, and the timer's
 * callback rescans the queue and re-arms).
 *
 * Completion callbacks run on nng's threads with no peer lock held.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "net.h"
#include "lpeer.h"
#include <nng/supplemental/util/platform.h>
#include "msg.h"
#include "log.h"
#include "sx_errors.h"

#define PEER_BATCH_MAX NET_MULTI_MAX          /* calls in one frame */
#define PEER_BATCH_BYTES (4u * 1024u * 1024u) /* request bytes in one frame */

typedef struct peer_ent {
    struct peer_ent *next;
    const uint8_t *req;
    size_t n;
    nng_time deadline; /* the call fails with SX_ETIMEDOUT once it passes */
    bool forever;      /* no deadline (a negative timeout) */
    net_done_fn done;
    void *arg;
    bool solo; /* its reply did not fit a shared frame: send alone */
} peer_ent;

typedef struct peer_car {
    net_peer *p;
    nng_ctx ctx;
    nng_aio *aio;
    int phase; /* 0 sending, 1 receiving */
    int busy;
    int ctx_open;
    bool solo;                  /* carries one solo call at a time, never a queue */
    struct peer_car *next_solo; /* in the peer's solo_all list */
    struct peer_car *next_free; /* in the peer's solo_free list */
    peer_ent *ents;             /* the calls this carrier's frame holds, in order */
    uint32_t n;
} peer_car;

struct net_peer {
    lpeer *lp;                 /* a link's peer (net_peer_open_link): all goes there */
    net_server *local;         /* or a server of this process (net_peer_open_local) */
    atomic_ullong local_calls; /* calls handed to it (net_peer_local_calls) */
    nng_socket sock;
    pthread_mutex_t mu;
    peer_car *solo_all, *solo_free; /* contexts made for solo calls */
    peer_ent *head, *tail;
    peer_car *cars;
    int ncars;
    int closing;
    nng_aio *timer;    /* fails queued calls at their deadline */
    bool timer_armed;  /* the timer runs, or its callback is due */
    nng_time timer_at; /* when it fires */
};

int net_batch_frames(int dflt)
{
    static int cached = -2; /* -1: not set in the environment */
    int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);

    if (v == -2) {
        const char *env = getenv("SHARDEX_BATCH_FRAMES");
        char *end = NULL;
        long l = env && *env ? strtol(env, &end, 10) : -1;
        v = (end && *end == '\0' && l >= 0 && l <= 1024) ? (int)l : -1;
        __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
    }
    return v >= 0 ? v : dflt;
}

/* Completes and frees every call of list ents with err. */
static void ents_fail(peer_ent *ents, int err)
{
    while (ents) {
        peer_ent *next = ents->next;
        ents->done(ents->arg, err, NULL, 0);
        free(ents);
        ents = next;
    }
}

/* Unlinks from list *head the calls whose deadline has passed and returns
 * them, in order; *head keeps the others, in order. Sets *last (unless
 * NULL) to the last call kept (NULL: none) and *kept (unless NULL) to
 * their count. */
static peer_ent *take_expired(peer_ent **head, peer_ent **last, uint32_t *kept)
{
    nng_time now = nng_clock();
    peer_ent *gone = NULL, **gt = &gone, **pp = head, *prev = NULL;
    uint32_t n = 0;

    while (*pp != NULL) {
        peer_ent *e = *pp;

        if (!e->forever && e->deadline <= now) {
            *pp = e->next;
            e->next = NULL;
            *gt = e;
            gt = &e->next;
        } else {
            prev = e;
            pp = &e->next;
            n++;
        }
    }
    if (last)
        *last = prev;
    if (kept)
        *kept = n;
    return gone;
}

/* Arms the timer to fire at `at`. Call with p->mu held. */
static void timer_arm_locked(net_peer *p, nng_time at)
{
    nng_time now = nng_clock();

    p->timer_armed = true;
    p->timer_at = at;
    nng_sleep_aio(at > now ? (nng_duration)(at - now) : 0, p->timer);
}

/* Calls with deadline `at` were queued: makes sure the timer fires by
 * then. Call with p->mu held. */
static void timer_want_locked(net_peer *p, nng_time at)
{
    if (p->closing || p->timer == NULL)
        return;
    if (!p->timer_armed)
        timer_arm_locked(p, at);
    else if (at < p->timer_at)
        nng_aio_cancel(p->timer); /* its callback re-arms earlier */
}

/* The earliest deadline in list e, or 0 when no call there has one. */
static nng_time first_deadline(const peer_ent *e)
{
    nng_time at = 0;

    for (; e; e = e->next)
        if (!e->forever && (at == 0 || e->deadline < at))
            at = e->deadline;
    return at;
}

/* The timer fired (or was cancelled): fails the queued calls whose
 * deadline has passed and re-arms for the earliest one left. */
static void timer_cb(void *arg)
{
    net_peer *p = arg;
    peer_ent *gone;

    pthread_mutex_lock(&p->mu);
    p->timer_armed = false;
    if (p->closing) {
        pthread_mutex_unlock(&p->mu);
        return;
    }
    gone = take_expired(&p->head, &p->tail, NULL);
    nng_time at = first_deadline(p->head);
    if (at != 0)
        timer_arm_locked(p, at);
    pthread_mutex_unlock(&p->mu);
    ents_fail(gone, SX_ETIMEDOUT);
}

/* Moves the queue's head (up to the limits) to car. Call with p->mu held.
 * Returns false when there is nothing to take. */
static bool take_locked(net_peer *p, peer_car *car)
{
    size_t bytes = 0;
    peer_ent *last = NULL, *e = p->head;
    uint32_t n = 0;

    if (e == NULL || p->closing)
        return false;
    while (e && n < PEER_BATCH_MAX &&
           (n == 0 || (bytes + e->n <= PEER_BATCH_BYTES && !e->solo && !p->head->solo))) {
        bytes += e->n;
        n++;
        last = e;
        e = e->next;
    }
    car->ents = p->head;
    car->n = n;
    last->next = NULL;
    p->head = e;
    if (e == NULL)
        p->tail = NULL;
    return true;
}

/* The time a frame holding list e may still wait: until the latest
 * deadline among its calls (at least 1 ms), or forever. */
static nng_duration frame_wait(const peer_ent *e)
{
    nng_time now = nng_clock(), last = 0;

    for (; e; e = e->next) {
        if (e->forever)
            return NNG_DURATION_INFINITE;
        if (e->deadline > last)
            last = e->deadline;
    }
    return last > now + 1 ? (nng_duration)(last - now) : 1;
}

/* Fails (SX_ETIMEDOUT) and drops the calls of car whose deadline has
 * passed; car keeps the others, in order. */
static void drop_expired(peer_car *car)
{
    ents_fail(take_expired(&car->ents, NULL, &car->n), SX_ETIMEDOUT);
}

/* Builds car's frame and starts sending it, after failing its calls whose
 * deadline has passed. Returns 0, or an sx_err after which the caller fails
 * car's calls (SX_ETIMEDOUT with none left when all had expired). */
static int car_send(peer_car *car)
{
    nng_msg *m = NULL;
    nng_duration timeout;
    int rv;

    drop_expired(car);
    if (car->ents == NULL)
        return SX_ETIMEDOUT;
    timeout = frame_wait(car->ents);
    /* each frame's message is allocated at its size, once (frames of
     * bulk writes are MiBs: growing them would copy them over and over) */
    if (car->n == 1) {
        rv = net_msg_copy(&m, car->ents->req, car->ents->n);
    } else {
        msg_MULTI_req rq;
        mp_buf b;
        size_t size = 32;
        uint32_t i = 0;

        rq.frames.n = car->n;
        rq.frames.v = malloc(car->n * sizeof(mp_span));
        if (rq.frames.v == NULL)
            return SX_ENOMEM;
        for (peer_ent *e = car->ents; e; e = e->next, i++) {
            rq.frames.v[i].p = e->req;
            rq.frames.v[i].n = e->n;
            size += e->n + 5; /* a bin's header is at most 5 bytes */
        }
        mp_buf_init(&b);
        mp_buf_reserve(&b, size);
        if (msg_encode_req(MSG_MULTI, &rq, &b) != 0 || b.oom)
            rv = NNG_ENOMEM;
        else
            rv = net_msg_copy(&m, b.sb.data, b.sb.size);
        mp_buf_free(&b);
        free(rq.frames.v);
    }
    if (rv != 0)
        return net_map_nng(rv);
    car->phase = 0;
    nng_aio_set_timeout(car->aio, timeout);
    nng_aio_set_msg(car->aio, m);
    nng_ctx_send(car->ctx, car->aio);
    return 0;
}

/* Marks car idle, holding no calls. Call with p->mu held. */
static void car_idle_locked(peer_car *car)
{
    car->busy = 0;
    car->ents = NULL;
    car->n = 0;
}

/* car is done with its frame: start the next one from the queue, or go
 * idle. */
static void car_next(peer_car *car)
{
    net_peer *p = car->p;

    if (car->solo) {
        pthread_mutex_lock(&p->mu);
        car_idle_locked(car);
        car->next_free = p->solo_free;
        p->solo_free = car;
        pthread_mutex_unlock(&p->mu);
        return;
    }
    for (;;) {
        pthread_mutex_lock(&p->mu);
        if (!take_locked(p, car)) {
            car_idle_locked(car);
            pthread_mutex_unlock(&p->mu);
            return;
        }
        pthread_mutex_unlock(&p->mu);
        int rc = car_send(car);
        if (rc == 0)
            return;
        ents_fail(car->ents, rc);
    }
}

/* Every idle carrier takes a frame's worth while calls are queued. Call
 * with p->mu held; returns with it released. */
static void pump_locked(net_peer *p)
{
    for (int i = 0; i < p->ncars && p->head != NULL; i++) {
        peer_car *car = &p->cars[i];
        if (car->busy)
            continue;
        car->busy = 1;
        if (!take_locked(p, car)) {
            car->busy = 0;
            break;
        }
        pthread_mutex_unlock(&p->mu);
        int rc = car_send(car);
        if (rc != 0) {
            ents_fail(car->ents, rc);
            car->ents = NULL;
            car_next(car);
        }
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
}

/* True when reply frame p..n is the server's "did not fit the MULTI
 * frame" marker (not a handler's own SX_ETOOBIG, which must not be
 * resent: the request ran). */
static bool reply_unfit(const uint8_t *p, size_t n)
{
    mp_cur c = mp_cur_make(p, n);
    uint32_t cnt;
    uint64_t ver, type, err;
    mp_span why;

    if (mp_read_array(&c, &cnt) != 0 || cnt < 4 || mp_read_u64(&c, &ver) != 0 ||
        mp_read_u64(&c, &type) != 0 || mp_read_u64(&c, &err) != 0 || err != SX_ETOOBIG ||
        mp_read_str(&c, &why) != 0)
        return false;
    return mp_span_eq_cstr(why, NET_MULTI_UNFIT);
}

/* Puts list e back at the head of p's queue, each call marked solo. */
static void requeue_solo(net_peer *p, peer_ent *first, peer_ent *last)
{
    for (peer_ent *e = first; e; e = e->next)
        e->solo = true;
    pthread_mutex_lock(&p->mu);
    nng_time at = first_deadline(first);
    last->next = p->head;
    p->head = first;
    if (p->tail == NULL)
        p->tail = last;
    if (at != 0)
        timer_want_locked(p, at);
    pthread_mutex_unlock(&p->mu);
}

/* Hands reply frame m of a frame of n calls (list e, taken off its
 * carrier) to each call; calls whose replies did not fit a MULTI frame go
 * back to the head of the queue, solo (only when n > 1). */
static void car_deliver(net_peer *p, peer_ent *e, uint32_t n, nng_msg *m)
{
    const uint8_t *body = nng_msg_body(m);
    size_t len = nng_msg_len(m);

    if (n == 1) {
        e->done(e->arg, 0, body, len);
        free(e);
        return;
    }
    msg_MULTI_rep rep;
    char why[128];
    int rc = msg_decode_rep(MSG_MULTI, body, len, &rep, why, sizeof(why));
    if (rc == 0 && rep.frames.n != n) {
        LOG_ERROR("MULTI reply holds %u frames for %u requests", rep.frames.n, n);
        rc = SX_EPROTO;
    } else if (rc != 0) {
        LOG_ERROR("MULTI refused: %s", why);
    }
    if (rc != 0) {
        msg_free_rep(MSG_MULTI, &rep);
        ents_fail(e, rc);
        return;
    }
    peer_ent *rfirst = NULL, *rlast = NULL;
    for (uint32_t i = 0; e; i++) {
        peer_ent *next = e->next;
        if (reply_unfit(rep.frames.v[i].p, rep.frames.v[i].n)) {
            e->next = NULL;
            if (rlast)
                rlast->next = e;
            else
                rfirst = e;
            rlast = e;
        } else {
            e->done(e->arg, 0, rep.frames.v[i].p, rep.frames.v[i].n);
            free(e);
        }
        e = next;
    }
    msg_free_rep(MSG_MULTI, &rep);
    if (rfirst)
        requeue_solo(p, rfirst, rlast);
}

static void car_cb(void *arg)
{
    peer_car *car = arg;
    int rv = nng_aio_result(car->aio);

    if (rv != 0) {
        if (car->phase == 0) {
            nng_msg_free(nng_aio_get_msg(car->aio));
            nng_aio_set_msg(car->aio, NULL);
        }
        ents_fail(car->ents, net_map_nng(rv));
        car->ents = NULL;
        car_next(car);
        return;
    }
    if (car->phase == 0) {
        car->phase = 1;
        nng_aio_set_msg(car->aio, NULL); /* sent: nng owns it now */
        nng_aio_set_timeout(car->aio, frame_wait(car->ents));
        nng_ctx_recv(car->ctx, car->aio);
        return;
    }
    nng_msg *m = nng_aio_get_msg(car->aio);
    net_peer *p = car->p;
    peer_ent *ents = car->ents;
    uint32_t n = car->n;
    bool idle = false;

    nng_aio_set_msg(car->aio, NULL);
    /* A lone call's reply with nothing queued: the carrier goes idle
     * before the callback runs. The callback may wake a caller whose next
     * call would otherwise find the carrier still held by this thread
     * (which a busy host may not run again for a while) and wait for it.
     * With calls queued, the callbacks run first, so the calls they make
     * join the next frame. Only a plain frame's reply, which never queues
     * calls again (a MULTI's may: replies too large to share it), so this
     * thread never starts another carrier, which net_peer_close could be
     * shutting meanwhile. car is not touched once idle: another thread may
     * already be using it. */
    if (!car->solo && n == 1) {
        pthread_mutex_lock(&p->mu);
        if (p->head == NULL) {
            car_idle_locked(car);
            idle = true;
        }
        pthread_mutex_unlock(&p->mu);
    }
    car_deliver(p, ents, n, m);
    nng_msg_free(m);
    if (idle)
        return;
    car->ents = NULL;
    car_next(car);
}

/* Stops car's aio (waiting for a callback in progress) and fails what it
 * still holds: an operation its callback started while the peer was
 * closing is refused by nng without a callback, leaving its calls (and an
 * unsent frame) behind. Then frees the aio. */
static void car_shut(peer_car *car)
{
    nng_aio_stop(car->aio);
    nng_msg *m = nng_aio_get_msg(car->aio);
    if (m != NULL && car->phase == 0)
        nng_msg_free(m);
    nng_aio_set_msg(car->aio, NULL);
    ents_fail(car->ents, SX_EUNAVAIL);
    car->ents = NULL;
    nng_aio_free(car->aio);
    if (car->ctx_open)
        nng_ctx_close(car->ctx);
}

int net_peer_open(nng_socket sock, int max_frames, net_peer **out)
{
    net_peer *p = calloc(1, sizeof(*p));

    if (p == NULL)
        return SX_ENOMEM;
    if (max_frames < 1)
        max_frames = 1;
    p->sock = sock;
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        free(p);
        return SX_ENOMEM;
    }
    p->cars = calloc((size_t)max_frames, sizeof(*p->cars));
    if (p->cars == NULL) {
        net_peer_close(p);
        return SX_ENOMEM;
    }
    int trv = nng_aio_alloc(&p->timer, timer_cb, p);
    if (trv != 0) {
        p->timer = NULL;
        net_peer_close(p);
        return net_map_nng(trv);
    }
    for (int i = 0; i < max_frames; i++) {
        peer_car *car = &p->cars[i];
        int rv;

        car->p = p;
        if ((rv = nng_aio_alloc(&car->aio, car_cb, car)) != 0) {
            net_peer_close(p);
            return net_map_nng(rv);
        }
        p->ncars++;
        if ((rv = nng_ctx_open(&car->ctx, sock)) != 0) {
            net_peer_close(p);
            return net_map_nng(rv);
        }
        car->ctx_open = 1;
    }
    *out = p;
    return 0;
}

int net_peer_open_local(net_server *srv, net_peer **out)
{
    net_peer *p = calloc(1, sizeof(*p));

    if (p == NULL)
        return SX_ENOMEM;
    p->local = srv;
    *out = p;
    return 0;
}

/* Hands calls to p's server in this process, one by one (nothing to
 * coalesce: no transport); a call the server refuses completes at once. */
static int local_submit_n(net_peer *p, const net_peer_call *calls, int n)
{
    if (n > 0)
        atomic_fetch_add_explicit(&p->local_calls, (unsigned long long)n, memory_order_relaxed);
    for (int i = 0; i < n; i++) {
        int rc = net_server_call_local(p->local, calls[i].req, calls[i].n, calls[i].done,
                                       calls[i].arg);
        if (rc != 0)
            calls[i].done(calls[i].arg, rc, NULL, 0);
    }
    return 0;
}

uint64_t net_peer_local_calls(net_peer *p)
{
    return p != NULL && p->local != NULL
               ? atomic_load_explicit(&p->local_calls, memory_order_relaxed)
               : 0;
}

int net_peer_open_link(const char *url, int max_batches, net_peer **out)
{
    net_peer *p = calloc(1, sizeof(*p));
    int rc;

    if (p == NULL)
        return SX_ENOMEM;
    rc = lpeer_open(url, max_batches, &p->lp);
    if (rc != 0) {
        free(p);
        return rc;
    }
    *out = p;
    return 0;
}

void net_peer_shut(net_peer *p)
{
    if (p != NULL && p->lp != NULL)
        lpeer_shut(p->lp);
}

bool net_peer_connected(net_peer *p)
{
    return p->local != NULL || (p->lp != NULL && lpeer_connected(p->lp));
}

/* A queue entry for call c, or NULL (out of memory). */
static peer_ent *ent_new(const net_peer_call *c, int timeout_ms, bool solo)
{
    peer_ent *e = malloc(sizeof(*e));

    if (e != NULL)
        *e = (peer_ent){ .req = c->req,
                         .n = c->n,
                         .deadline = nng_clock() + (nng_time)(timeout_ms > 0 ? timeout_ms : 0),
                         .forever = timeout_ms < 0,
                         .done = c->done,
                         .arg = c->arg,
                         .solo = solo };
    return e;
}

int net_peer_submit_n(net_peer *p, const net_peer_call *calls, int n, int timeout_ms)
{
    peer_ent *first = NULL, *last = NULL;

    if (p->lp != NULL)
        return lpeer_submit_n(p->lp, calls, n, timeout_ms, false);
    if (p->local != NULL)
        return local_submit_n(p, calls, n);
    if (n <= 0)
        return 0;
    for (int i = 0; i < n; i++) {
        peer_ent *e = ent_new(&calls[i], timeout_ms, false);
        if (e == NULL) {
            while (first) {
                peer_ent *next = first->next;
                free(first);
                first = next;
            }
            return SX_ENOMEM;
        }
        if (last)
            last->next = e;
        else
            first = e;
        last = e;
    }
    pthread_mutex_lock(&p->mu);
    if (p->closing) {
        pthread_mutex_unlock(&p->mu);
        while (first) {
            peer_ent *next = first->next;
            free(first);
            first = next;
        }
        return SX_EUNAVAIL;
    }
    nng_time at = first_deadline(first);
    if (p->tail)
        p->tail->next = first;
    else
        p->head = first;
    p->tail = last;
    if (at != 0)
        timer_want_locked(p, at);
    pump_locked(p);
    return 0;
}

int net_peer_submit_solo(net_peer *p, const uint8_t *req, size_t n, int timeout_ms,
                         net_done_fn done, void *arg)
{
    net_peer_call c = { .req = req, .n = n, .done = done, .arg = arg };
    peer_ent *e;
    peer_car *car = NULL;
    int rv;

    if (p->lp != NULL) /* a link's calls never hold each other up */
        return lpeer_submit_n(p->lp, &c, 1, timeout_ms, true);
    if (p->local != NULL)
        return local_submit_n(p, &c, 1);
    e = ent_new(&c, timeout_ms, true);
    if (e == NULL)
        return SX_ENOMEM;
    pthread_mutex_lock(&p->mu);
    if (p->closing) {
        pthread_mutex_unlock(&p->mu);
        free(e);
        return SX_EUNAVAIL;
    }
    car = p->solo_free;
    if (car != NULL) {
        p->solo_free = car->next_free;
        car->busy = 1;
    }
    pthread_mutex_unlock(&p->mu);
    if (car == NULL) {
        car = calloc(1, sizeof(*car));
        if (car == NULL) {
            free(e);
            return SX_ENOMEM;
        }
        car->p = p;
        car->solo = true;
        car->busy = 1;
        if ((rv = nng_aio_alloc(&car->aio, car_cb, car)) != 0) {
            free(car);
            free(e);
            return net_map_nng(rv);
        }
        if ((rv = nng_ctx_open(&car->ctx, p->sock)) != 0) {
            nng_aio_free(car->aio);
            free(car);
            free(e);
            return net_map_nng(rv);
        }
        car->ctx_open = 1;
        pthread_mutex_lock(&p->mu);
        car->next_solo = p->solo_all;
        p->solo_all = car;
        pthread_mutex_unlock(&p->mu);
    }
    car->ents = e;
    car->n = 1;
    rv = car_send(car);
    if (rv != 0) {
        ents_fail(car->ents, rv);
        car->ents = NULL;
        car_next(car);
    }
    return 0;
}

int net_peer_submit(net_peer *p, const uint8_t *req, size_t n, int timeout_ms, net_done_fn done,
                    void *arg)
{
    net_peer_call c = { .req = req, .n = n, .done = done, .arg = arg };

    return net_peer_submit_n(p, &c, 1, timeout_ms);
}

void net_peer_close(net_peer *p)
{
    if (p == NULL)
        return;
    if (p->lp != NULL) {
        lpeer_close(p->lp);
        free(p);
        return;
    }
    if (p->local != NULL) { /* its server answers every call it took */
        free(p);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->closing = 1;
    pthread_mutex_unlock(&p->mu);
    if (p->timer != NULL) {
        nng_aio_stop(p->timer); /* waits for a callback in progress */
        nng_aio_free(p->timer);
    }
    /* Freeing an aio cancels its operation and waits for the callback,
     * which fails that frame's calls and, the peer closing, goes idle. */
    for (int i = 0; i < p->ncars; i++)
        car_shut(&p->cars[i]);
    while (p->solo_all != NULL) {
        peer_car *car = p->solo_all;
        p->solo_all = car->next_solo;
        car_shut(car);
        free(car);
    }
    ents_fail(p->head, SX_EUNAVAIL);
    free(p->cars);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
