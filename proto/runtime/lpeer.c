/*
 * lpeer.c — calls over a link, with a background redial (see lpeer.h).
 *
 * Every call gets the next id and waits in the peer's list until its reply
 * (found by id), its deadline (the peer's timer, armed at the earliest
 * deadline), or the connection's loss. A call made while the connection is
 * down waits in the list unsent and goes out, in order, once the redial
 * succeeds.
 *
 * Calls leave in batches, at most max_batches of them unanswered at once:
 * a lone call goes out at once, and calls made while the window is full
 * wait and leave together, in one write, when a batch is answered in full.
 * Under load a frame's costs (a write, a wake-up per side) are then shared
 * by many calls, as a MULTI frame shares them over REQ/REP. A solo call
 * (long: a scan page) goes out at once outside the window.
 *
 * A call sent on a connection that drops goes out again on the next one
 * when it only reads (msg_rerunnable; once, as nng's REQ resent a request
 * whose connection broke); any other fails with SX_EUNAVAIL: whether the
 * server ran it is unknown, and only the caller knows whether running it
 * again is harmless.
 *
 * A call that asks to know whether it was sent (net_peer_call.unsent: a
 * caller with somewhere else to send it, the router walking a partition's
 * replicas) waits for no connection instead: made while none is up, or
 * still unsent when the connection drops, it fails at once with
 * SX_EUNAVAIL and *unsent set; sent on a connection that drops, it fails
 * with SX_EUNAVAIL (never sent twice); at its deadline SX_ETIMEDOUT, with
 * *unsent telling whether it had left.
 *
 * The dialer runs one aio: after a failed dial it sleeps (20 ms, doubling
 * to 500 ms) and dials again; it dials as soon as the connection drops. A
 * connection that answered nothing for a second while a call sent on it
 * expired is closed as dead (LP_SILENT_MS); the calls waiting for room in
 * its window are not sent on it.
 *
 * Callbacks (the calls' done) run with no lock held, on nng threads.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <nng/nng.h>
#include <nng/supplemental/util/platform.h>

#include "lpeer.h"
#include "link.h"
#include "msg.h"
#include "log.h"
#include "sx_errors.h"

#define LP_REDIAL_MIN_MS 20
#define LP_REDIAL_MAX_MS 500
/* A connection that answered nothing for this long while a call sent on it
 * expired is taken for dead (a host cut off, paused or gone without a
 * reset): it is closed and dialed again, instead of waiting for TCP's
 * retransmissions, which after a long cut resume seconds after the network
 * is back. */
#define LP_SILENT_MS 1000

typedef struct lp_batch {
    int left; /* calls of the batch not finished yet */
} lp_batch;

typedef struct lp_call {
    struct lp_call *next, *prev;
    uint64_t id;
    const uint8_t *req;
    size_t n;
    bool sent;
    bool solo;
    bool resent;     /* sent again after a lost connection */
    lp_batch *batch; /* sent in this batch (NULL: solo, or unsent) */
    bool forever;
    nng_time deadline;
    nng_time sent_at; /* when it went out (sent) */
    net_done_fn done;
    void *arg;
    bool *unsent; /* net_peer_call.unsent (NULL: wait for a connection) */
} lp_call;

struct lpeer {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *url;
    nng_stream_dialer *dialer;
    nng_aio *dial;
    bool dial_sleeping; /* the dial aio sleeps before the next dial */
    bool dial_busy;
    int backoff_ms;
    link_conn *link;  /* up, or NULL */
    nng_time last_rx; /* the last frame received on link (or its start) */
    int links_open;   /* links whose closed callback is still due */
    nng_aio *timer;
    bool timer_armed;
    nng_time timer_at;
    lp_call *head, *tail;
    uint64_t next_id;
    int max_batches;
    int batches; /* sent and not yet answered in full */
    bool closing;
};

/* Takes c out of its batch; true when that finished the batch (the
 * window has room again). */
static bool unbatch(lpeer *p, lp_call *c)
{
    bool freed = false;

    if (c->batch != NULL && --c->batch->left == 0) {
        free(c->batch);
        p->batches--;
        freed = true;
    }
    c->batch = NULL;
    return freed;
}

/* Unlinks c from p's list; true when that finished its batch. */
static bool list_del(lpeer *p, lp_call *c)
{

    if (c->prev)
        c->prev->next = c->next;
    else
        p->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        p->tail = c->prev;
    c->next = c->prev = NULL;
    return unbatch(p, c);
}

/* Completes every call of singly linked list c (by next) with err. */
static void calls_fail(lp_call *c, int err)
{
    while (c) {
        lp_call *next = c->next;
        c->done(c->arg, err, NULL, 0);
        free(c);
        c = next;
    }
}

/* Which calls take_where takes. */
typedef enum lp_take {
    LP_TAKE_ALL,     /* every call */
    LP_TAKE_EXPIRED, /* those whose deadline has passed */
    LP_TAKE_DROPPED  /* those a dropped connection fails: sent, or asking
                      * about it (net_peer_call.unsent) */
} lp_take;

/* Unlinks the calls `which` names into a list, each asking about it told
 * whether it was sent (caller holds p->mu). */
static lp_call *take_where(lpeer *p, lp_take which)
{
    nng_time now = nng_clock();
    lp_call *gone = NULL, **gt = &gone;

    for (lp_call *c = p->head, *next; c != NULL; c = next) {
        next = c->next;
        if ((which == LP_TAKE_DROPPED && !c->sent && c->unsent == NULL) ||
            (which == LP_TAKE_EXPIRED && (c->forever || c->deadline > now)))
            continue;
        if (c->unsent != NULL)
            *c->unsent = !c->sent;
        list_del(p, c);
        *gt = c;
        gt = &c->next;
    }
    return gone;
}

/* Unlinks, from first to the end of p's list, the calls not sent that ask
 * whether they were (net_peer_call.unsent: set) into a list (caller holds
 * p->mu). */
static lp_call *take_unsent(lpeer *p, lp_call *first)
{
    lp_call *gone = NULL, **gt = &gone;

    for (lp_call *c = first, *next; c != NULL; c = next) {
        next = c->next;
        if (c->sent || c->unsent == NULL)
            continue;
        *c->unsent = true;
        list_del(p, c);
        *gt = c;
        gt = &c->next;
    }
    return gone;
}

/* ---- the timer ---- */

static void flush_locked(lpeer *p);

static void timer_arm_locked(lpeer *p, nng_time at)
{
    nng_time now = nng_clock();

    p->timer_armed = true;
    p->timer_at = at;
    nng_sleep_aio(at > now ? (nng_duration)(at - now) : 0, p->timer);
}

static void timer_want_locked(lpeer *p, nng_time at)
{
    if (p->closing)
        return;
    if (!p->timer_armed)
        timer_arm_locked(p, at);
    else if (at < p->timer_at)
        nng_aio_cancel(p->timer); /* its callback re-arms earlier */
}

static void timer_cb(void *arg)
{
    lpeer *p = arg;
    lp_call *gone;
    nng_time at = 0;

    pthread_mutex_lock(&p->mu);
    p->timer_armed = false;
    if (p->closing) {
        pthread_mutex_unlock(&p->mu);
        return;
    }
    gone = take_where(p, LP_TAKE_EXPIRED);
    /* nothing heard since an expired call went out, for LP_SILENT_MS: the
     * connection is dead */
    link_conn *dead = NULL;
    nng_time now = nng_clock();
    for (lp_call *c = gone; c != NULL && dead == NULL && p->link != NULL; c = c->next)
        if (c->sent && c->sent_at >= p->last_rx && now - c->sent_at >= LP_SILENT_MS) {
            dead = p->link;
            link_ref(dead);
        }
    if (p->link != NULL && dead == NULL)
        flush_locked(p); /* an expired call may have finished a batch (not
                          * onto a dead connection: they wait for the next) */
    for (lp_call *c = p->head; c != NULL; c = c->next)
        if (!c->forever && (at == 0 || c->deadline < at))
            at = c->deadline;
    if (at != 0)
        timer_arm_locked(p, at);
    pthread_mutex_unlock(&p->mu);
    calls_fail(gone, SX_ETIMEDOUT);
    if (dead != NULL) {
        LOG_INFO("link to %s: no answer for %d ms while calls expired: closed, dialing again",
                 p->url, LP_SILENT_MS);
        link_close(dead); /* its closed callback redials */
        link_unref(dead);
    }
}

/* ---- the link ---- */

static void on_frame(void *arg, link_conn *l, uint64_t id, uint8_t *frame, size_t n, bool more)
{
    lpeer *p = arg;
    lp_call *c;

    (void)more;
    pthread_mutex_lock(&p->mu);
    if (p->link == l)
        p->last_rx = nng_clock();
    for (c = p->head; c != NULL && c->id != id; c = c->next)
        ;
    if (c != NULL && list_del(p, c) && p->link != NULL)
        flush_locked(p);
    pthread_mutex_unlock(&p->mu);
    if (c != NULL) { /* else it timed out or was failed already */
        c->done(c->arg, 0, frame, n);
        free(c);
    }
    free(frame);
}

static void dial_start_locked(lpeer *p);

static void on_closed(void *arg, link_conn *l, int err)
{
    lpeer *p = arg;
    lp_call *gone;

    pthread_mutex_lock(&p->mu);
    if (p->link == l)
        p->link = NULL;
    for (lp_call *c = p->head; c != NULL; c = c->next) {
        msg_type t;
        int is_reply = 0;

        if (c->sent && !c->resent && c->unsent == NULL &&
            msg_peek(c->req, c->n, &t, &is_reply) == 0 && msg_rerunnable(t)) {
            c->sent = false; /* a read: out again on the next link */
            c->resent = true;
            (void)unbatch(p, c);
        }
    }
    gone = take_where(p, LP_TAKE_DROPPED);
    if (!p->closing) {
        LOG_DEBUG("link to %s lost (%s); redialing", p->url, sx_strerror(err));
        p->backoff_ms = LP_REDIAL_MIN_MS;
        dial_start_locked(p);
    }
    pthread_mutex_unlock(&p->mu);
    calls_fail(gone, SX_EUNAVAIL);
    pthread_mutex_lock(&p->mu);
    p->links_open--;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    link_unref(l);
}

/* Sends the unsent calls (caller holds p->mu, link up): solo ones at
 * once, the others as one batch while the window has room. On a failure
 * they stay unsent: the link is closing, and its closed callback redials. */
static void flush_locked(lpeer *p)
{
    link_out v[64];
    lp_call *cs[64];
    lp_batch *b = NULL;
    int k = 0;
    bool room = p->batches < p->max_batches;
    lp_call *c = p->head;

    for (;;) {
        while (c != NULL && (c->sent || (!c->solo && !room)))
            c = c->next;
        if (c != NULL) {
            v[k] = (link_out){ c->id, c->req, c->n };
            cs[k++] = c;
            c = c->next;
        }
        if (k == 64 || (c == NULL && k > 0)) {
            if (link_sendv(p->link, v, k) != 0)
                break;
            nng_time now = nng_clock();
            for (int i = 0; i < k; i++) {
                cs[i]->sent = true;
                cs[i]->sent_at = now;
                if (cs[i]->solo)
                    continue;
                if (b == NULL && (b = calloc(1, sizeof(*b))) == NULL) {
                    cs[i]->solo = true; /* unbatched: outside the window */
                    continue;
                }
                b->left++;
                cs[i]->batch = b;
            }
            k = 0;
        }
        if (c == NULL)
            break;
    }
    if (b != NULL)
        p->batches++;
}

static void dial_start_locked(lpeer *p)
{
    if (p->dial_busy || p->closing)
        return;
    p->dial_busy = true;
    p->dial_sleeping = false;
    nng_stream_dialer_dial(p->dialer, p->dial);
}

static void dial_cb(void *arg)
{
    lpeer *p = arg;
    int rv = nng_aio_result(p->dial);
    link_conn *l = NULL;

    pthread_mutex_lock(&p->mu);
    if (p->closing) {
        if (rv == 0 && !p->dial_sleeping) /* connected just as it closed */
            nng_stream_free(nng_aio_get_output(p->dial, 0));
        p->dial_busy = false;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        return;
    }
    if (p->dial_sleeping) { /* the back-off is over: dial */
        p->dial_sleeping = false;
        nng_stream_dialer_dial(p->dialer, p->dial);
        pthread_mutex_unlock(&p->mu);
        return;
    }
    if (rv == 0 &&
        link_wrap(nng_aio_get_output(p->dial, 0), p->url, on_frame, on_closed, p, &l) == 0) {
        p->dial_busy = false;
        p->link = l;
        p->last_rx = nng_clock();
        p->links_open++;
        p->backoff_ms = LP_REDIAL_MIN_MS;
        flush_locked(p);
        pthread_mutex_unlock(&p->mu);
        return;
    }
    p->dial_sleeping = true; /* failed: try again after a while */
    nng_sleep_aio(p->backoff_ms, p->dial);
    p->backoff_ms = p->backoff_ms * 2 > LP_REDIAL_MAX_MS ? LP_REDIAL_MAX_MS : p->backoff_ms * 2;
    pthread_mutex_unlock(&p->mu);
}

/* ---- the API ---- */

int lpeer_open(const char *url, int max_batches, lpeer **out)
{
    lpeer *p = calloc(1, sizeof(*p));
    int rv;

    if (p == NULL)
        return SX_ENOMEM;
    if ((p->url = strdup(url)) == NULL) {
        free(p);
        return SX_ENOMEM;
    }
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        free(p->url);
        free(p);
        return SX_ENOMEM;
    }
    if (pthread_cond_init(&p->cv, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        free(p->url);
        free(p);
        return SX_ENOMEM;
    }
    rv = nng_stream_dialer_alloc(&p->dialer, url);
    if (rv != 0) {
        LOG_ERROR("dial %s: %s", url, nng_strerror(rv));
        lpeer_close(p);
        return rv == NNG_ENOMEM ? SX_ENOMEM : SX_EINVAL;
    }
    if (nng_aio_alloc(&p->dial, dial_cb, p) != 0 || nng_aio_alloc(&p->timer, timer_cb, p) != 0) {
        lpeer_close(p);
        return SX_ENOMEM;
    }
    p->backoff_ms = LP_REDIAL_MIN_MS;
    p->max_batches = max_batches > 0 ? max_batches : 1;
    pthread_mutex_lock(&p->mu);
    dial_start_locked(p);
    pthread_mutex_unlock(&p->mu);
    *out = p;
    return 0;
}

int lpeer_submit_n(lpeer *p, const net_peer_call *calls, int n, int timeout_ms, bool solo)
{
    lp_call *first = NULL, *last = NULL;
    nng_time now = nng_clock();

    if (n <= 0)
        return 0;
    for (int i = 0; i < n; i++)
        if (calls[i].n > SX_MAX_FRAME)
            return SX_ETOOBIG; /* a link would refuse it, and hold up the rest */
    for (int i = 0; i < n; i++) {
        lp_call *c = calloc(1, sizeof(*c));
        if (c == NULL) {
            while (first) {
                lp_call *next = first->next;
                free(first);
                first = next;
            }
            return SX_ENOMEM;
        }
        c->req = calls[i].req;
        c->n = calls[i].n;
        c->done = calls[i].done;
        c->arg = calls[i].arg;
        c->unsent = calls[i].unsent;
        c->solo = solo;
        c->forever = timeout_ms < 0;
        c->deadline = now + (nng_time)(timeout_ms < 0 ? 0 : timeout_ms);
        if (last)
            last->next = c;
        else
            first = c;
        c->prev = last;
        last = c;
    }
    pthread_mutex_lock(&p->mu);
    if (p->closing) {
        pthread_mutex_unlock(&p->mu);
        while (first) {
            lp_call *next = first->next;
            free(first);
            first = next;
        }
        return SX_EUNAVAIL;
    }
    for (lp_call *c = first; c != NULL; c = c->next)
        c->id = ++p->next_id;
    first->prev = p->tail;
    if (p->tail)
        p->tail->next = first;
    else
        p->head = first;
    p->tail = last;
    if (p->link != NULL)
        flush_locked(p);
    else
        dial_start_locked(p);
    /* with no connection, those asking whether they were sent fail now */
    lp_call *gone = p->link == NULL ? take_unsent(p, first) : NULL;
    if (timeout_ms >= 0 && p->head != NULL)
        timer_want_locked(p, now + (nng_time)timeout_ms);
    pthread_mutex_unlock(&p->mu);
    calls_fail(gone, SX_EUNAVAIL);
    return 0;
}

bool lpeer_connected(lpeer *p)
{
    pthread_mutex_lock(&p->mu);
    bool up = p->link != NULL;
    pthread_mutex_unlock(&p->mu);
    return up;
}

void lpeer_shut(lpeer *p)
{
    lp_call *gone;
    link_conn *l;

    pthread_mutex_lock(&p->mu);
    p->closing = true;
    gone = take_where(p, LP_TAKE_ALL);
    l = p->link;
    if (l != NULL)
        link_ref(l); /* its closed callback may run any time now */
    pthread_mutex_unlock(&p->mu);
    calls_fail(gone, SX_EUNAVAIL);
    if (p->dial)
        nng_aio_stop(p->dial); /* its callback has returned: no new link */
    if (p->timer)
        nng_aio_stop(p->timer);
    if (l != NULL) {
        link_close(l);
        link_unref(l);
    }
}

void lpeer_close(lpeer *p)
{
    if (p == NULL)
        return;
    lpeer_shut(p);
    pthread_mutex_lock(&p->mu);
    while (p->links_open > 0)
        pthread_cond_wait(&p->cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
    if (p->dial)
        nng_aio_free(p->dial);
    if (p->timer)
        nng_aio_free(p->timer);
    if (p->dialer)
        nng_stream_dialer_free(p->dialer);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p->url);
    free(p);
}
