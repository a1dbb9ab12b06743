/*
 * link.c — framed request/reply connections over nng streams (see link.h).
 *
 * A link owns two aios. The receive aio reads into a growing buffer as
 * much as the socket holds; its callback cuts every whole frame out of the
 * buffer, hands each to the frame callback, keeps the partial rest and
 * reads again. The send aio writes one buffer; frames queued meanwhile
 * gather in a second buffer, and the send callback swaps the two and
 * writes again, so a burst of replies leaves in one write. While the
 * receive callback hands out a receive's frames the link is corked: what
 * their callbacks send (a server's quick replies, a caller's next calls)
 * waits and leaves in one write once the last frame was handled.
 *
 * Back-pressure: a server counts the requests of a link it has not
 * answered yet (link_hold / link_release), and the reply bytes it has not
 * sent yet; once either reaches its limit (the listener's count, or
 * LINK_UNSENT_MAX bytes) the link reads no more (what one receive brought
 * is still handed out) until both are down to half, so a peer that sends
 * faster than the server answers, or does not read its replies, fills its
 * own socket buffers, not the server's memory.
 *
 * Closing: link_close (or an error on either aio) closes the stream, which
 * fails whatever aio is pending. Once neither aio is pending, the closed
 * callback runs once and the link's own reference is dropped; the memory
 * goes with the last reference. The aios are reaped (nng_aio_reap), so the
 * last drop may happen inside one of their callbacks.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <nng/nng.h>
#include <nng/supplemental/util/platform.h>
#include <sodium.h>

#include "link.h"
#include "link_auth.h"
#include "hash.h"
#include "log.h"
#include "net.h"
#include "sx_errors.h"

#define LINK_RBUF_MIN (64u * 1024u) /* free room a receive is offered, at least */
/* Reply bytes a server's link may hold unsent before it reads no more:
 * two frames of the largest size. */
#define LINK_UNSENT_MAX (2u * (size_t)SX_MAX_FRAME)
#define LINK_RBUF_MAX (4u << 20)  /* ... and at most, unless a frame needs more */
#define LINK_ACCEPT_PAUSE_MS 10   /* after a failed accept (no file descriptor left) */
#define LINK_SBUF_KEEP (1u << 20) /* send buffers above this are freed when idle */
/* An accepted authenticated link's peer must send its hello and proof
 * within this (SHARDEX_LINK_PROOF_MS lowers it, for tests), or the
 * connection is closed: a stranger cannot hold connections open. */
#define LINK_PROOF_MS 10000

struct link_conn {
    nng_stream *s;
    pthread_mutex_t mu;
    int refs;
    bool closing;  /* no more sends; the stream is (being) closed */
    bool notified; /* closed callback ran (or is running) */
    int err;       /* why it closed (0: link_close) */
    link_frame_fn on_frame;
    link_closed_fn on_closed;
    void *arg;
    link_listener *ls;      /* accepted links: their listener */
    link_auth *au;          /* authenticated links (a key is set): their state */
    bool au_ready;          /* the peer's hello came: frames can be sealed */
    bool au_proven;         /* (accepted links) the dialer's proof frame came */
    bool dialed;            /* this side dialed */
    nng_time au_deadline;   /* (accepted authenticated links) the proof's */
    link_conn *next, *prev; /* in ls->links */
    /* receive */
    nng_aio *rx;
    bool rx_busy;
    bool rx_paused;  /* held or unsent bytes reached their limit: no
                      * receive until both are down to half */
    int held, limit; /* unanswered requests (link_hold), and their cap */
    uint8_t *rbuf;
    size_t rcap, rlen;
    size_t rwant; /* free room offered to the next receive: doubles
                   * while receives fill it, halves when they do not
                   * use a quarter (a burst then arrives in few reads) */
    /* send: out gathers frames while cur is being written */
    nng_aio *tx;
    bool tx_busy;
    bool corked; /* the receive callback is handing out frames */
    uint8_t *out, *cur;
    size_t out_n, out_cap, cur_n, cur_off, cur_cap;
};

struct link_listener {
    nng_stream_listener *l;
    nng_aio *acc;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool closing;
    bool acc_busy;
    bool acc_pausing; /* acc sleeps before the next accept */
    link_conn *links;
    atomic_int sending;  /* accepted links with bytes to write */
    pthread_mutex_t dmu; /* with dcv: sending reached 0 (never held */
    pthread_cond_t dcv;  /* while taking another lock) */
    link_frame_fn on_frame;
    link_closed_fn on_closed;
    void *arg;
    int limit;  /* each accepted link's cap on held requests */
    bool keyed; /* accepted links are authenticated with key */
    uint8_t key[LINK_KEY_BYTES];
    char *url;    /* what it listens on (the links' keys cover it) */
    int proof_ms; /* LINK_PROOF_MS, or the environment's */
};

static void rx_cb(void *arg);
static void tx_cb(void *arg);
static void tx_next(link_conn *l);

static void link_free(link_conn *l)
{
    if (l->rx)
        nng_aio_reap(l->rx);
    if (l->tx)
        nng_aio_reap(l->tx);
    if (l->s)
        nng_stream_free(l->s);
    pthread_mutex_destroy(&l->mu);
    la_free(l->au);
    free(l->rbuf);
    free(l->out);
    free(l->cur);
    free(l);
}

void link_ref(link_conn *l)
{
    pthread_mutex_lock(&l->mu);
    l->refs++;
    pthread_mutex_unlock(&l->mu);
}

void link_unref(link_conn *l)
{
    int left;

    pthread_mutex_lock(&l->mu);
    left = --l->refs;
    pthread_mutex_unlock(&l->mu);
    if (left == 0)
        link_free(l);
}

/* Runs the closed callback once nothing is pending (caller holds l->mu,
 * which this releases). */
static void settle_unlock(link_conn *l)
{
    link_listener *ls = l->ls;

    if (!l->closing || l->rx_busy || l->tx_busy || l->notified) {
        pthread_mutex_unlock(&l->mu);
        return;
    }
    l->notified = true;
    pthread_mutex_unlock(&l->mu);
    if (l->on_closed)
        l->on_closed(l->arg, l, l->err);
    if (ls != NULL) {
        pthread_mutex_lock(&ls->mu);
        if (l->prev)
            l->prev->next = l->next;
        else
            ls->links = l->next;
        if (l->next)
            l->next->prev = l->prev;
        pthread_cond_broadcast(&ls->cv);
        pthread_mutex_unlock(&ls->mu);
    }
    link_unref(l);
}

/* Marks l closing with err (the first reason wins) and closes its stream
 * (caller holds l->mu). */
static void close_locked(link_conn *l, int err)
{
    if (l->closing)
        return;
    l->closing = true;
    l->err = err;
    nng_stream_close(l->s);
}

void link_close(link_conn *l)
{
    pthread_mutex_lock(&l->mu);
    close_locked(l, 0);
    settle_unlock(l);
}

/* Marks l's sender busy or idle (caller holds l->mu); an accepted link
 * counts in its listener's sending, for link_listener_drain. */
static void tx_busy_set(link_conn *l, bool busy)
{
    link_listener *ls = l->ls;

    if (l->tx_busy == busy)
        return;
    l->tx_busy = busy;
    if (ls == NULL)
        return;
    if (busy) {
        atomic_fetch_add(&ls->sending, 1);
    } else if (atomic_fetch_sub(&ls->sending, 1) == 1) {
        pthread_mutex_lock(&ls->dmu);
        pthread_cond_broadcast(&ls->dcv);
        pthread_mutex_unlock(&ls->dmu);
    }
}

/* Whether l is an accepted authenticated link whose peer has not proved
 * the key yet (its receives run against the proof's deadline). */
static bool awaiting_proof(const link_conn *l)
{
    return l->au != NULL && !l->dialed && !l->au_proven;
}

/* Starts a receive into the free room of rbuf (caller holds l->mu). */
static void rx_start(link_conn *l)
{
    nng_iov iov = { l->rbuf + l->rlen, l->rcap - l->rlen };
    nng_duration wait = NNG_DURATION_INFINITE;

    if (awaiting_proof(l)) {
        nng_time now = nng_clock();
        wait = l->au_deadline > now ? (nng_duration)(l->au_deadline - now) : 1;
    }
    l->rx_busy = true;
    nng_aio_set_timeout(l->rx, wait);
    nng_aio_set_iov(l->rx, 1, &iov);
    nng_stream_recv(l->s, l->rx);
}

/* Ensures rbuf has room for need bytes in all and rwant free; a large
 * buffer left empty shrinks back. */
static int rbuf_room(link_conn *l, size_t need)
{
    size_t want = need > l->rlen + l->rwant ? need : l->rlen + l->rwant;
    uint8_t *nb;

    if (l->rlen == 0 && l->rcap > LINK_RBUF_MAX && want <= LINK_RBUF_MAX) {
        free(l->rbuf); /* a big frame's buffer, not kept */
        l->rbuf = NULL;
        l->rcap = 0;
    }
    if (want <= l->rcap)
        return 0;
    nb = realloc(l->rbuf, want);
    if (nb == NULL)
        return SX_ENOMEM;
    l->rbuf = nb;
    l->rcap = want;
    return 0;
}

/* Takes the peer's hello from the front of rbuf, once it is all there
 * (authenticated links); returns the bytes taken (0: not yet), or -1 when
 * the peer did not send one (the link must close). */
static long rx_hello(link_conn *l)
{
    if (l->au_ready)
        return 0;
    /* a peer without the key sends a frame: refused at its first bytes,
     * not after waiting for a hello's worth */
    bool not_hello = memcmp(l->rbuf, LINK_MAGIC, l->rlen < 4 ? l->rlen : 4) != 0;
    if (!not_hello && l->rlen < LINK_HELLO)
        return 0;
    if (not_hello || la_hello(l->au, l->rbuf) != 0) {
        LOG_WARN("link: the peer did not authenticate (no \"link_key\" in its config, or "
                 "not a shardex process); closing the connection");
        return -1;
    }
    pthread_mutex_lock(&l->mu);
    l->au_ready = true; /* rx_cb's tx_next sends what waited for it */
    pthread_mutex_unlock(&l->mu);
    return LINK_HELLO;
}

/* Hands every whole frame of rbuf to the frame callback and keeps the
 * rest; returns 0, or SX_EPROTO / SX_ENOMEM (the link must close). On an
 * authenticated link the peer's hello comes first, and a frame whose tag
 * fails closes the link before it is handed over. Each frame is handed
 * over once the next one is known: with more = true only when that next
 * one will be handed over too, so a burst's last frame always says so,
 * whatever stops the burst (a partial frame, a bad length or tag, no
 * memory). */
static int rx_frames(link_conn *l)
{
    size_t off = 0, tag = l->au ? LINK_TAG : 0;
    uint8_t *held = NULL; /* the frame waiting for its successor */
    size_t held_n = 0;
    uint64_t held_id = 0;
    int rc = 0;

    if (l->au) {
        long took = rx_hello(l);
        if (took < 0)
            return SX_EPROTO;
        off = (size_t)took;
        if (!l->au_ready)
            return rbuf_room(l, LINK_HELLO);
    }
    while (l->rlen - off >= LINK_HDR) {
        const uint8_t *h = l->rbuf + off;
        uint32_t len = be_get32(h);
        uint8_t *frame;

        if (len < 8 || len > 8u + SX_MAX_FRAME) {
            if (!l->au && memcmp(h, LINK_MAGIC, 4) == 0)
                LOG_WARN("link: the peer authenticates its links but this process has no "
                         "\"link_key\" (every process needs the same one); closing the "
                         "connection");
            else
                LOG_WARN("link: frame length %u out of bounds; closing the connection", len);
            rc = SX_EPROTO;
            break;
        }
        /* an accepted link's first frame is the dialer's proof: anything
         * else is refused at its header, before it is buffered */
        if (l->au && !l->dialed && !l->au_proven && (len != 8 || be_get64(h + 4) != 0)) {
            LOG_WARN("link: the peer sent a frame before proving it holds the \"link_key\"; "
                     "closing the connection");
            rc = SX_EPROTO;
            break;
        }
        if (l->rlen - off < 4u + (size_t)len + tag)
            break;
        if (l->au && la_open(l->au, h, 4u + (size_t)len, h + 4u + len) != 0) {
            LOG_WARN("link: a frame failed authentication (the peer's \"link_key\" or cluster "
                     "name differs, or the frame was altered); closing the connection");
            rc = SX_EPROTO;
            break;
        }
        if (l->au && !l->dialed && !l->au_proven) {
            l->au_proven = true; /* the proof: not handed over */
            off += 4u + (size_t)len + tag;
            continue;
        }
        frame = malloc(len > 8 ? len - 8 : 1);
        if (frame == NULL) {
            rc = SX_ENOMEM;
            break;
        }
        memcpy(frame, h + LINK_HDR, len - 8);
        if (held != NULL)
            l->on_frame(l->arg, l, held_id, held, held_n, true);
        held = frame;
        held_n = len - 8;
        held_id = be_get64(h + 4);
        off += 4u + (size_t)len + tag;
    }
    if (held != NULL)
        l->on_frame(l->arg, l, held_id, held, held_n, false);
    if (off > 0) {
        memmove(l->rbuf, l->rbuf + off, l->rlen - off);
        l->rlen -= off;
    }
    if (rc == 0 && l->rlen >= LINK_HDR)
        rc = rbuf_room(l, 4u + (size_t)be_get32(l->rbuf) + tag);
    if (rc == 0)
        rc = rbuf_room(l, 0);
    return rc;
}

/* Bytes queued or being written (caller holds l->mu). */
static size_t unsent(const link_conn *l)
{
    return l->out_n + (l->tx_busy ? l->cur_n - l->cur_off : 0);
}

/* A server's link that must read no more for now (caller holds l->mu). */
static bool link_full(const link_conn *l)
{
    return l->limit > 0 && (l->held >= l->limit || unsent(l) >= LINK_UNSENT_MAX);
}

/* Reads again on a paused link once it is down to half of both limits
 * (caller holds l->mu). */
static void link_resume(link_conn *l)
{
    if (l->rx_paused && !l->closing && l->held <= l->limit / 2 &&
        unsent(l) <= LINK_UNSENT_MAX / 2) {
        l->rx_paused = false;
        rx_start(l);
    }
}

static void rx_cb(void *arg)
{
    link_conn *l = arg;
    int rv = nng_aio_result(l->rx);
    int rc;

    if (rv != 0) {
        if (rv == NNG_ETIMEDOUT && awaiting_proof(l))
            LOG_WARN("link: the peer sent no hello and proof within %d ms; closing the "
                     "connection",
                     l->ls ? l->ls->proof_ms : LINK_PROOF_MS);
        pthread_mutex_lock(&l->mu);
        l->rx_busy = false;
        close_locked(l, rv == NNG_ETIMEDOUT ? SX_EPROTO : net_map_nng(rv));
        settle_unlock(l);
        return;
    }
    size_t got = nng_aio_count(l->rx), offered = l->rcap - l->rlen;

    l->rlen += got;
    if (got == offered && l->rwant < LINK_RBUF_MAX)
        l->rwant *= 2;
    else if (got < offered / 4 && l->rwant > LINK_RBUF_MIN)
        l->rwant /= 2;
    pthread_mutex_lock(&l->mu);
    l->corked = true;
    pthread_mutex_unlock(&l->mu);
    rc = rx_frames(l); /* rx is ours alone until it is restarted */
    pthread_mutex_lock(&l->mu);
    l->corked = false;
    if (!l->tx_busy)
        tx_next(l); /* what the frames' callbacks sent meanwhile */
    if (rc != 0)
        close_locked(l, rc);
    if (l->closing) {
        l->rx_busy = false;
        settle_unlock(l);
        return;
    }
    if (link_full(l)) {
        l->rx_busy = false; /* link_release or tx_cb reads on */
        l->rx_paused = true;
        pthread_mutex_unlock(&l->mu);
        return;
    }
    rx_start(l);
    pthread_mutex_unlock(&l->mu);
}

void link_hold(link_conn *l)
{
    pthread_mutex_lock(&l->mu);
    l->held++;
    pthread_mutex_unlock(&l->mu);
}

void link_release(link_conn *l)
{
    pthread_mutex_lock(&l->mu);
    l->held--;
    link_resume(l);
    pthread_mutex_unlock(&l->mu);
}

bool link_reading(link_conn *l)
{
    pthread_mutex_lock(&l->mu);
    bool paused = l->rx_paused;
    pthread_mutex_unlock(&l->mu);
    return !paused;
}

/* Starts writing cur from cur_off (caller holds l->mu). */
static void tx_start(link_conn *l)
{
    nng_iov iov = { l->cur + l->cur_off, l->cur_n - l->cur_off };

    tx_busy_set(l, true);
    nng_aio_set_iov(l->tx, 1, &iov);
    nng_stream_send(l->s, l->tx);
}

/* Writes the tag of every frame in out, in order (caller holds l->mu):
 * each frame left room for it after its payload. */
static void seal_out(link_conn *l)
{
    for (size_t o = 0; o < l->out_n;) {
        size_t n = 4u + (size_t)be_get32(l->out + o);

        la_seal(l->au, l->out + o, n, l->out + o + n);
        o += n + LINK_TAG;
    }
}

/* Swaps out into cur and starts writing it, if anything is queued and may
 * leave (an authenticated link's frames wait for the peer's hello); else
 * marks the sender idle (caller holds l->mu). */
static void tx_next(link_conn *l)
{
    uint8_t *b = l->cur;
    size_t cap = l->cur_cap;

    if (l->out_n == 0 || l->closing || (l->au && !l->au_ready)) {
        tx_busy_set(l, false);
        if (l->cur_cap > LINK_SBUF_KEEP) { /* a burst's buffer, not kept */
            free(l->cur);
            l->cur = NULL;
            l->cur_cap = 0;
        }
        return;
    }
    if (l->au)
        seal_out(l);
    l->cur = l->out;
    l->cur_cap = l->out_cap;
    l->cur_n = l->out_n;
    l->cur_off = 0;
    l->out = b;
    l->out_cap = cap;
    l->out_n = 0;
    tx_start(l);
}

static void tx_cb(void *arg)
{
    link_conn *l = arg;
    int rv = nng_aio_result(l->tx);

    pthread_mutex_lock(&l->mu);
    if (rv != 0) {
        tx_busy_set(l, false);
        close_locked(l, net_map_nng(rv));
        settle_unlock(l);
        return;
    }
    l->cur_off += nng_aio_count(l->tx);
    if (l->cur_off < l->cur_n && !l->closing)
        tx_start(l);
    else
        tx_next(l);
    link_resume(l);
    settle_unlock(l);
}

int link_sendv(link_conn *l, const link_out *v, int n)
{
    size_t need, add = 0, tag = l->au ? LINK_TAG : 0;

    for (int i = 0; i < n; i++) {
        if (v[i].n > SX_MAX_FRAME)
            return SX_ETOOBIG;
        add += LINK_HDR + v[i].n + tag;
    }
    pthread_mutex_lock(&l->mu);
    if (l->closing) {
        pthread_mutex_unlock(&l->mu);
        return SX_EUNAVAIL;
    }
    need = l->out_n + add;
    if (need > l->out_cap) {
        size_t cap = l->out_cap ? l->out_cap : 4096;
        while (cap < need)
            cap *= 2;
        uint8_t *nb = realloc(l->out, cap);
        if (nb == NULL) {
            pthread_mutex_unlock(&l->mu);
            return SX_ENOMEM;
        }
        l->out = nb;
        l->out_cap = cap;
    }
    for (int i = 0; i < n; i++) {
        uint8_t *o = l->out + l->out_n;
        be_put32(o, (uint32_t)(8 + v[i].n));
        be_put64(o + 4, v[i].id);
        if (v[i].n > 0)
            memcpy(o + LINK_HDR, v[i].p, v[i].n);
        l->out_n += LINK_HDR + v[i].n + tag; /* the tag: seal_out */
    }
    if (!l->tx_busy && !l->corked)
        tx_next(l);
    pthread_mutex_unlock(&l->mu);
    return 0;
}

int link_send(link_conn *l, uint64_t id, const uint8_t *p, size_t n)
{
    link_out o = { id, p, n };

    return link_sendv(l, &o, 1);
}

/* A link on stream s (taken: freed with the link on failure too), that
 * this side dialed or accepted, to or on url; with a key (LINK_KEY_BYTES,
 * else NULL) it is authenticated: its hello waits in cur for link_start,
 * and a dialer's proof frame is the first in out. */
static int link_new(nng_stream *s, const uint8_t *key, bool dialer, const char *url,
                    link_frame_fn on_frame, link_closed_fn on_closed, void *arg, link_conn **out)
{
    link_conn *l = calloc(1, sizeof(*l));

    if (l == NULL) {
        nng_stream_free(s);
        return SX_ENOMEM;
    }
    l->s = s;
    l->refs = 1;
    l->on_frame = on_frame;
    l->on_closed = on_closed;
    l->arg = arg;
    l->rwant = LINK_RBUF_MIN;
    if (pthread_mutex_init(&l->mu, NULL) != 0) {
        nng_stream_free(s);
        free(l);
        return SX_ENOMEM;
    }
    uint8_t hello[LINK_HELLO];
    int err = 0;
    l->dialed = dialer;
    l->au = la_new(key, dialer, url, hello, &err);
    if (l->au != NULL) {
        l->cur = malloc(LINK_HELLO);
        if (l->cur != NULL) {
            memcpy(l->cur, hello, LINK_HELLO);
            l->cur_n = l->cur_cap = LINK_HELLO;
        }
        l->out = dialer ? malloc(4096) : NULL;
        if (l->out != NULL) { /* the proof: empty, id 0 */
            l->out_cap = 4096;
            be_put32(l->out, 8);
            be_put64(l->out + 4, 0);
            l->out_n = LINK_HDR + LINK_TAG;
        }
    }
    if (err != 0 || (l->au != NULL && (l->cur == NULL || (dialer && l->out == NULL))) ||
        nng_aio_alloc(&l->rx, rx_cb, l) != 0 || nng_aio_alloc(&l->tx, tx_cb, l) != 0 ||
        rbuf_room(l, 0) != 0) {
        link_free(l);
        return SX_ENOMEM;
    }
    /* Nagle would hold a small frame back until the previous one's ACK. */
    (void)nng_stream_set_bool(s, NNG_OPT_TCP_NODELAY, true);
    *out = l;
    return 0;
}

/* Starts a new link: its hello out, if it has one, and its first receive
 * (caller holds l->mu). */
static void link_start(link_conn *l)
{
    if (l->au != NULL)
        tx_start(l);
    rx_start(l);
}

static int url_err(int rv)
{
    return rv == NNG_ENOMEM                            ? SX_ENOMEM
           : rv == NNG_EADDRINVAL || rv == NNG_ENOTSUP ? SX_EINVAL
                                                       : SX_ENET;
}

int link_dial(const char *url, int timeout_ms, link_frame_fn on_frame, link_closed_fn on_closed,
              void *arg, link_conn **out)
{
    nng_stream_dialer *d = NULL;
    nng_aio *aio = NULL;
    int rv, rc;

    rv = nng_stream_dialer_alloc(&d, url);
    if (rv != 0)
        return url_err(rv);
    rv = nng_aio_alloc(&aio, NULL, NULL);
    if (rv != 0) {
        nng_stream_dialer_free(d);
        return SX_ENOMEM;
    }
    nng_aio_set_timeout(aio, timeout_ms < 0 ? NNG_DURATION_INFINITE : timeout_ms);
    nng_stream_dialer_dial(d, aio);
    nng_aio_wait(aio);
    rv = nng_aio_result(aio);
    if (rv != 0) {
        nng_aio_free(aio);
        nng_stream_dialer_free(d);
        return net_map_nng(rv);
    }
    rc = link_wrap(nng_aio_get_output(aio, 0), url, on_frame, on_closed, arg, out);
    nng_aio_free(aio);
    nng_stream_dialer_free(d); /* established streams outlive it */
    return rc;
}

int link_wrap(nng_stream *s, const char *url, link_frame_fn on_frame, link_closed_fn on_closed,
              void *arg, link_conn **out)
{
    link_conn *l;
    uint8_t key[LINK_KEY_BYTES];
    int rc = link_new(s, link_auth_key(key) ? key : NULL, true, url, on_frame, on_closed, arg, &l);

    sodium_memzero(key, sizeof key);

    if (rc != 0)
        return rc;
    pthread_mutex_lock(&l->mu);
    l->refs++; /* the caller's */
    link_start(l);
    pthread_mutex_unlock(&l->mu);
    *out = l;
    return 0;
}

/* Accepts again, at once or (after an error such as running out of file
 * descriptors) after LINK_ACCEPT_PAUSE_MS; caller holds ls->mu. */
static void accept_next(link_listener *ls, bool pause)
{
    ls->acc_pausing = pause;
    if (pause)
        nng_sleep_aio(LINK_ACCEPT_PAUSE_MS, ls->acc);
    else
        nng_stream_listener_accept(ls->l, ls->acc);
}

static void acc_cb(void *arg)
{
    link_listener *ls = arg;
    int rv = nng_aio_result(ls->acc);
    bool pausing;
    link_conn *l = NULL;

    pthread_mutex_lock(&ls->mu);
    pausing = ls->acc_pausing;
    ls->acc_pausing = false;
    if (ls->closing || rv == NNG_ECLOSED || rv == NNG_ECANCELED) {
        ls->acc_busy = false;
        pthread_cond_broadcast(&ls->cv);
        pthread_mutex_unlock(&ls->mu);
        if (rv == 0 && !pausing) /* accepted just as the listener closed */
            nng_stream_free(nng_aio_get_output(ls->acc, 0));
        return;
    }
    if (pausing || rv != 0) { /* the pause is over, or an accept failed */
        if (!pausing)
            LOG_WARN("link: accept failed (%s); accepting again in %d ms", nng_strerror(rv),
                     LINK_ACCEPT_PAUSE_MS);
        accept_next(ls, !pausing);
        pthread_mutex_unlock(&ls->mu);
        return;
    }
    if (link_new(nng_aio_get_output(ls->acc, 0), ls->keyed ? ls->key : NULL, false, ls->url,
                 ls->on_frame, ls->on_closed, ls->arg, &l) != 0) {
        LOG_WARN("link: out of memory for an accepted connection; dropped it");
    } else {
        l->ls = ls;
        l->limit = ls->limit;
        l->au_deadline = nng_clock() + (nng_time)ls->proof_ms;
        l->next = ls->links;
        if (ls->links)
            ls->links->prev = l;
        ls->links = l;
        pthread_mutex_lock(&l->mu);
        link_start(l);
        pthread_mutex_unlock(&l->mu);
    }
    accept_next(ls, false);
    pthread_mutex_unlock(&ls->mu);
}

int link_listen(const char *url, link_frame_fn on_frame, link_closed_fn on_closed, void *arg,
                int max_held, link_listener **out)
{
    link_listener *ls = calloc(1, sizeof(*ls));
    int rv;

    if (ls == NULL)
        return SX_ENOMEM;
    ls->limit = max_held > 0 ? max_held : 0;
    ls->keyed = link_auth_key(ls->key);
    ls->url = strdup(url);
    ls->proof_ms = (int)os_env_long("SHARDEX_LINK_PROOF_MS", 1, LINK_PROOF_MS, LINK_PROOF_MS);
    ls->on_frame = on_frame;
    ls->on_closed = on_closed;
    ls->arg = arg;
    if (ls->url == NULL || pthread_mutex_init(&ls->mu, NULL) != 0) {
        free(ls->url);
        free(ls);
        return SX_ENOMEM;
    }
    if (pthread_cond_init(&ls->cv, NULL) != 0) {
        pthread_mutex_destroy(&ls->mu);
        free(ls->url);
        free(ls);
        return SX_ENOMEM;
    }
    atomic_init(&ls->sending, 0);
    if (pthread_mutex_init(&ls->dmu, NULL) != 0 || pthread_cond_init(&ls->dcv, NULL) != 0) {
        pthread_cond_destroy(&ls->cv);
        pthread_mutex_destroy(&ls->mu);
        free(ls->url);
        free(ls); /* (a failed init leaves nothing to destroy) */
        return SX_ENOMEM;
    }
    rv = nng_stream_listener_alloc(&ls->l, url);
    if (rv != 0) {
        LOG_ERROR("listen %s: %s", url, nng_strerror(rv));
        link_listener_close(ls);
        return url_err(rv);
    }
    rv = nng_stream_listener_listen(ls->l);
    if (rv == 0)
        rv = nng_aio_alloc(&ls->acc, acc_cb, ls);
    if (rv != 0) {
        LOG_ERROR("listen %s: %s", url, nng_strerror(rv));
        link_listener_close(ls);
        return rv == NNG_ENOMEM ? SX_ENOMEM : SX_ENET;
    }
    ls->acc_busy = true;
    nng_stream_listener_accept(ls->l, ls->acc);
    *out = ls;
    return 0;
}

void link_listener_close(link_listener *ls)
{
    if (ls == NULL)
        return;
    pthread_mutex_lock(&ls->mu);
    ls->closing = true;
    pthread_mutex_unlock(&ls->mu);
    if (ls->l)
        nng_stream_listener_close(ls->l);
    pthread_mutex_lock(&ls->mu);
    while (ls->acc_busy)
        pthread_cond_wait(&ls->cv, &ls->mu);
    /* Close every link. Its pending aios fail and settle it; one with none
     * pending (reading paused at its cap, nothing to write) is settled
     * here, outside ls->mu, which settling takes. */
    for (;;) {
        link_conn *l = NULL;

        for (link_conn *k = ls->links; k != NULL && l == NULL; k = k->next) {
            pthread_mutex_lock(&k->mu);
            if (!k->closing) {
                l = k;
                l->refs++; /* kept while ls->mu is let go */
            }
            pthread_mutex_unlock(&k->mu);
        }
        if (l == NULL)
            break;
        pthread_mutex_unlock(&ls->mu);
        pthread_mutex_lock(&l->mu);
        close_locked(l, SX_EUNAVAIL);
        settle_unlock(l);
        link_unref(l);
        pthread_mutex_lock(&ls->mu);
    }
    while (ls->links != NULL)
        pthread_cond_wait(&ls->cv, &ls->mu);
    pthread_mutex_unlock(&ls->mu);
    if (ls->acc)
        nng_aio_free(ls->acc);
    if (ls->l)
        nng_stream_listener_free(ls->l);
    pthread_cond_destroy(&ls->dcv);
    pthread_mutex_destroy(&ls->dmu);
    pthread_cond_destroy(&ls->cv);
    pthread_mutex_destroy(&ls->mu);
    sodium_memzero(ls->key, sizeof ls->key);
    free(ls->url);
    free(ls);
}

bool link_listener_drain(link_listener *ls, int timeout_ms)
{
    struct timespec dl;
    bool idle;

    os_deadline_in(&dl, CLOCK_REALTIME, timeout_ms);
    pthread_mutex_lock(&ls->dmu);
    while (atomic_load(&ls->sending) > 0 && pthread_cond_timedwait(&ls->dcv, &ls->dmu, &dl) == 0)
        ;
    idle = atomic_load(&ls->sending) == 0;
    pthread_mutex_unlock(&ls->dmu);
    return idle;
}
