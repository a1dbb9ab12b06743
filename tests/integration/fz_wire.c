/*
 * fz_wire.c — sx-fuzzframe's transports and judge: a frame sent to a port
 * over nng REQ/REP (routers) or a link (storage and index nodes: a 4-byte
 * length and an 8-byte id before each frame, proto/PROTOCOL.md
 * "Transport"; with the cluster's link key, hellos first and a tag after
 * each frame, by proto/runtime/link_auth.h), its reply awaited until a deadline,
 * and the check that a reply is a well-formed answer to the request it
 * answers.
 */
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include <unistd.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include "link.h"
#include "link_auth.h"
#include "sx_errors.h"
#include "fz.h"
#include "rawlink.h"

/* ---- clock ----------------------------------------------------------------------- */

uint64_t fz_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ---- transports ---------------------------------------------------------------- */

void fz_conn_close(fz_conn *c)
{
    la_free(c->au);
    c->au = NULL;
    if (c->link && c->fd >= 0)
        close(c->fd);
    if (!c->link && c->open)
        nng_close(c->sock);
    c->fd = -1;
    c->open = false;
}

static int read_by(int fd, uint8_t *p, size_t n, uint64_t deadline);
static int link_put(fz_conn *c, uint64_t id, const uint8_t *p, size_t n);

/* Exchanges hellos on c's new link and sends the proof (an empty frame,
 * id 0) when a link key is set. 0 or -1. */
static int link_hello(fz_conn *c)
{
    uint8_t key[LINK_KEY_BYTES], mine[LINK_HELLO], theirs[LINK_HELLO];
    int err = 0;

    if (!link_auth_key(key))
        return 0;
    c->au = la_new(key, true, c->url, mine, &err);
    if (c->au == NULL)
        fz_die_oom();
    if (send(c->fd, mine, sizeof mine, MSG_NOSIGNAL) != (ssize_t)sizeof mine ||
        read_by(c->fd, theirs, sizeof theirs, fz_now_ms() + (uint64_t)c->timeout_ms) != 0 ||
        la_hello(c->au, theirs) != 0 || link_put(c, 0, NULL, 0) != 0)
        return -1;
    return 0;
}

/* (Re)connects c. Returns 0 or -1. */
int fz_conn_open(fz_conn *c)
{
    fz_conn_close(c);
    if (c->link) {
        c->fd = raw_connect(c->url);
        if (c->fd >= 0 && link_hello(c) != 0)
            fz_conn_close(c);
        return c->fd >= 0 ? 0 : -1;
    }
    if (nng_req0_open(&c->sock) != 0)
        return -1;
    c->open = true;
    nng_socket_set_ms(c->sock, NNG_OPT_RECVTIMEO, c->timeout_ms);
    nng_socket_set_ms(c->sock, NNG_OPT_SENDTIMEO, c->timeout_ms);
    nng_socket_set_ms(c->sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    nng_socket_set_size(c->sock, NNG_OPT_RECVMAXSZ, 64u * 1024u * 1024u);
    if (nng_dial(c->sock, c->url, NULL, 0) != 0) {
        fz_conn_close(c);
        return -1;
    }
    return 0;
}

/* Reads exactly n bytes by deadline; 0, or -1 (closed or error), -2 (time). */
static int read_by(int fd, uint8_t *p, size_t n, uint64_t deadline)
{
    while (n) {
        uint64_t now = fz_now_ms();
        struct pollfd pf = { fd, POLLIN, 0 };
        ssize_t got;

        if (now >= deadline)
            return -2;
        if (poll(&pf, 1, (int)(deadline - now)) <= 0)
            continue;
        got = recv(fd, p, n, 0);
        if (got <= 0)
            return -1;
        p += got;
        n -= (size_t)got;
    }
    return 0;
}

/* Sends p..n with id as one frame (and its tag) on c's link. 0 or -1. */
static int link_put(fz_conn *c, uint64_t id, const uint8_t *p, size_t n)
{
    size_t all = LINK_HDR + n + (c->au ? LINK_TAG : 0);
    uint8_t *b = malloc(all);

    if (b == NULL)
        fz_die_oom();
    fz_be_put(b, 8 + (uint64_t)n, 4);
    fz_be_put(b + 4, id, 8);
    if (n > 0)
        memcpy(b + LINK_HDR, p, n);
    if (c->au)
        la_seal(c->au, b, LINK_HDR + n, b + LINK_HDR + n);
    int rc = 0;
    for (size_t off = 0; off < all && rc == 0;) {
        ssize_t w = send(c->fd, b + off, all - off, MSG_NOSIGNAL);
        if (w <= 0)
            rc = -1;
        else
            off += (size_t)w;
    }
    free(b);
    return rc;
}

static fz_outcome link_call(fz_conn *c, const uint8_t *p, size_t n, tup_bytes *reply)
{
    uint64_t id = ++c->next_id, deadline = fz_now_ms() + (uint64_t)c->timeout_ms;

    if (link_put(c, id, p, n) != 0)
        return R_BROKEN;
    for (;;) { /* late replies of earlier (timed out) calls are skipped */
        uint64_t len, rid;
        uint8_t tag[LINK_TAG];
        /* reply->p holds the frame's header and payload while it is read
         * (the tag covers both), then the payload alone */
        if (reply->cap < LINK_HDR) {
            uint8_t *q = realloc(reply->p, LINK_HDR);
            if (q == NULL)
                fz_die_oom();
            reply->p = q;
            reply->cap = LINK_HDR;
        }
        reply->n = 0;
        int rc = read_by(c->fd, reply->p, LINK_HDR, deadline);

        if (rc)
            return rc == -2 ? R_TIMEOUT : R_BROKEN;
        len = 0;
        for (int i = 0; i < 4; i++)
            len = len << 8 | reply->p[i];
        rid = 0;
        for (int i = 4; i < 12; i++)
            rid = rid << 8 | reply->p[i];
        if (len < 8 || len > 8 + 64u * 1024u * 1024u)
            return R_BROKEN;
        if (reply->cap < 4 + len) {
            uint8_t *q = realloc(reply->p, 4 + len);
            if (q == NULL)
                fz_die_oom();
            reply->p = q;
            reply->cap = 4 + len;
        }
        rc = read_by(c->fd, reply->p + LINK_HDR, len - 8, deadline);
        if (rc == 0 && c->au)
            rc = read_by(c->fd, tag, sizeof tag, deadline);
        if (rc)
            return rc == -2 ? R_TIMEOUT : R_BROKEN;
        if (c->au && la_open(c->au, reply->p, 4 + len, tag) != 0)
            return R_BROKEN; /* a reply whose tag fails: the node's fault */
        memmove(reply->p, reply->p + LINK_HDR, len - 8);
        reply->n = len - 8;
        if (rid == id)
            return R_REPLY;
    }
}

/* Sends frame p..n on c and waits for its reply (into *reply). */
fz_outcome fz_conn_call(fz_conn *c, const uint8_t *p, size_t n, tup_bytes *reply)
{
    void *buf = NULL;
    size_t sz = 0;
    int rv;

    if ((c->link ? c->fd < 0 : !c->open) && fz_conn_open(c) != 0)
        return R_BROKEN;
    if (c->link)
        return link_call(c, p, n, reply);
    rv = nng_send(c->sock, (void *)p, n, 0);
    if (rv == 0)
        rv = nng_recv(c->sock, &buf, &sz, NNG_FLAG_ALLOC);
    if (rv != 0)
        return rv == NNG_ETIMEDOUT ? R_TIMEOUT : R_BROKEN;
    reply->n = 0;
    fz_add(reply, buf, sz);
    nng_free(buf, sz);
    return R_REPLY;
}

/* ---- judging a reply --------------------------------------------------------------- */

/* Checks that rp..pn is a well-formed answer to request rq..rn: an error
 * reply with a known code and a message, or a success reply of the
 * request's type that decodes as its reply (a MULTI's inner replies each
 * checked against their request). Sets *err (0 for success). Returns 0, or
 * -1 with the reason in why. */
int fz_check_reply(const uint8_t *rq, size_t rn, const uint8_t *rp, size_t pn, int depth,
                   uint64_t *err, char *why, size_t wl)
{
    mp_cur c = mp_cur_make(rp, pn);
    uint32_t count;
    uint64_t ver, type;
    msg_type t;
    int is_reply, rc;
    union {
        max_align_t a;
        char b[1024];
    } u;

    if (mp_read_array(&c, &count) || count < 3 || mp_read_u64(&c, &ver) || ver != 1 ||
        mp_read_u64(&c, &type) || !(type & MSG_REPLY) || mp_read_u64(&c, err)) {
        snprintf(why, wl, "the reply is not a reply frame [1, type|0x80, err, ...]");
        return -1;
    }
    if (*err != 0) {
        mp_span msg;
        if (*err >= SX__ERR_LIMIT) {
            snprintf(why, wl, "error reply with unknown code %" PRIu64, *err);
            return -1;
        }
        if (count < 4 || mp_read_str(&c, &msg) != 0) {
            snprintf(why, wl, "error reply %" PRIu64 " without a message", *err);
            return -1;
        }
        /* typed as the request, or (when its type cannot be told) as PING,
         * or as MULTI (an inner frame of one, or the MULTI itself) */
        type &= ~(uint64_t)MSG_REPLY;
        if (msg_peek(rq, rn, &t, &is_reply) == 0 && !is_reply && type != (uint64_t)t &&
            type != MSG_PING && type != MSG_MULTI) {
            snprintf(why, wl, "an error reply typed %" PRIu64 " to a %s request", type,
                     msg_name(t));
            return -1;
        }
        return 0;
    }
    if (msg_peek(rq, rn, &t, &is_reply) != 0 || is_reply) {
        snprintf(why, wl,
                 "a success reply (type 0x%" PRIx64 ") to a frame that is not a "
                 "request",
                 type);
        return -1;
    }
    if ((type & ~(uint64_t)MSG_REPLY) != (uint64_t)t) {
        snprintf(why, wl, "a success reply of type %" PRIu64 " to a %s request",
                 type & ~(uint64_t)MSG_REPLY, msg_name(t));
        return -1;
    }
    if (t == MSG_MULTI && depth == 0) {
        msg_MULTI_req mq;
        msg_MULTI_rep mr;
        int bad = 0;

        if (msg_decode_req(MSG_MULTI, rq, rn, &mq) != 0) {
            msg_free_req(MSG_MULTI, &mq);
            snprintf(why, wl, "a success reply to a MULTI that does not decode");
            return -1;
        }
        rc = msg_decode_rep(MSG_MULTI, rp, pn, &mr, NULL, 0);
        if (rc != 0 || mr.frames.n != mq.frames.n) {
            snprintf(why, wl, "MULTI reply: %s (%u replies to %u requests)",
                     rc ? sx_strerror(rc) : "wrong count", mr.frames.n, mq.frames.n);
            bad = 1;
        }
        for (uint32_t i = 0; !bad && i < mq.frames.n; i++) {
            uint64_t ie;
            char iw[200];
            if (fz_check_reply(mq.frames.v[i].p, mq.frames.v[i].n, mr.frames.v[i].p,
                               mr.frames.v[i].n, depth + 1, &ie, iw, sizeof iw) != 0) {
                snprintf(why, wl, "MULTI inner frame %u: %s", i, iw);
                bad = 1;
            }
        }
        msg_free_req(MSG_MULTI, &mq);
        msg_free_rep(MSG_MULTI, &mr);
        return bad ? -1 : 0;
    }
    if (t == MSG_MULTI) {
        snprintf(why, wl, "a nested MULTI was answered with success");
        return -1;
    }
    rc = msg_decode_rep(t, rp, pn, &u, NULL, 0);
    msg_free_rep(t, &u);
    if (rc != 0) {
        snprintf(why, wl, "the success reply does not decode as a %s reply: %s", msg_name(t),
                 sx_strerror(rc));
        return -1;
    }
    return 0;
}
