/*
 * link_auth_test.c — what authenticated links (proto/runtime/link_auth.h) refuse,
 * over real IPC sockets: a dialer with another key, or the same key in
 * another cluster, a dialer without a key, a keyed dialer to a listener
 * without one (each: the connection closes and the server is handed no
 * frame); speaking the protocol by hand as a dialer on a raw stream, a
 * frame with a good tag echoed (the reply's own tag checked), then an
 * altered frame, a replayed frame and a frame sealed out of sequence each
 * closing the link before the server sees it, and a frame sent without
 * the proof first, or keys derived for another URL (a redirected
 * connection), refused; as a listener by hand, the dialer's proof and
 * frame checked, a reply handed to it, and its own frame reflected back
 * refused; a peer stalled in its hello closed at the proof's deadline, a
 * proved link left open past its own. The happy paths (large frames, many
 * senders, the cap) run in link_test.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <nng/nng.h>

#include "check.h"
#include "hash.h"
#include "link.h"
#include "link_auth.h"
#include "rawstream.h"
#include "scratch.h"
#include "sx_errors.h"

/* ---- a server that echoes and counts, a client that counts ---- */

typedef struct side {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int frames; /* handed over */
    int closed; /* closed callbacks */
    int err;    /* the last close's reason */
} side;

static void side_init(side *s)
{
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
}

static void count_frame(side *s)
{
    pthread_mutex_lock(&s->mu);
    s->frames++;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void echo_frame(void *arg, link_conn *l, uint64_t id, uint8_t *frame, size_t n, bool more)
{
    (void)more;
    count_frame(arg);
    (void)link_send(l, id, frame, n);
    free(frame);
}

static void cli_frame(void *arg, link_conn *l, uint64_t id, uint8_t *frame, size_t n, bool more)
{
    (void)l, (void)id, (void)n, (void)more;
    free(frame);
    count_frame(arg);
}

static void on_closed(void *arg, link_conn *l, int err)
{
    side *s = arg;

    (void)l;
    pthread_mutex_lock(&s->mu);
    s->closed++;
    s->err = err;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* Waits (20 s at most) until s has frames frames and closed closes. */
static bool wait_side(side *s, int frames, int closed)
{
    struct timespec ts;
    int rv = 0;

    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 20;
    pthread_mutex_lock(&s->mu);
    while ((s->frames < frames || s->closed < closed) && rv == 0)
        rv = pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    bool ok = s->frames >= frames && s->closed >= closed;
    pthread_mutex_unlock(&s->mu);
    return ok;
}

/* Closes l, waits for its closed callback (which writes to s: s must
 * outlive it) and drops the caller's reference. */
static void close_wait(link_conn *l, side *s)
{
    if (l == NULL)
        return;
    link_close(l);
    CHECK(wait_side(s, 0, 1));
    link_unref(l);
}

static const uint8_t *key_a(void)
{
    static uint8_t k[LINK_KEY_BYTES];
    for (size_t i = 0; i < sizeof k; i++)
        k[i] = (uint8_t)(i + 1);
    return k;
}

static const uint8_t *key_b(void)
{
    static uint8_t k[LINK_KEY_BYTES];
    for (size_t i = 0; i < sizeof k; i++)
        k[i] = (uint8_t)(i + 1);
    k[31] ^= 0x80; /* one bit apart from key_a */
    return k;
}

/* The listener opened with lkey in cluster lc, the dialer with dkey in dc
 * (a key NULL: none): the same key and cluster echo a frame; otherwise the
 * connection closes on both sides and the server was handed nothing. */
static void pair_case(const char *url, const uint8_t *lkey, const char *lc, const uint8_t *dkey,
                      const char *dc)
{
    side srv, cli;
    link_listener *ls = NULL;
    link_conn *l = NULL;
    bool same = lkey == dkey && strcmp(lc, dc) == 0;

    side_init(&srv);
    side_init(&cli);
    link_auth_set_key(lkey, lc);
    CHECK_INT(link_listen(url, echo_frame, on_closed, &srv, 0, &ls), 0);
    link_auth_set_key(dkey, dc);
    if (ls != NULL)
        CHECK_INT(link_dial(url, 5000, cli_frame, on_closed, &cli, &l), 0);
    link_auth_set_key(NULL, NULL);
    if (l == NULL) {
        link_listener_close(ls);
        return;
    }
    int sent = link_send(l, 7, (const uint8_t *)"hello", 5);
    CHECK(sent == 0 || (!same && sent == SX_EUNAVAIL)); /* (a refusal may be quicker) */
    if (same) {
        CHECK(wait_side(&cli, 1, 0));
        CHECK_INT(srv.frames, 1);
        CHECK_INT(cli.closed, 0);
    } else {
        CHECK(wait_side(&cli, 0, 1));
        CHECK(wait_side(&srv, 0, 1));
        CHECK_INT(srv.frames, 0);
        CHECK_INT(cli.frames, 0);
        CHECK(srv.err != 0);
        CHECK_INT(link_send(l, 8, (const uint8_t *)"x", 1), SX_EUNAVAIL);
    }
    close_wait(l, &cli);
    link_listener_close(ls);
}

/* ---- the protocol by hand on a raw stream ---- */

/* A frame (id, payload) with its tag, sealed by a, into out; its size. */
static size_t sealed(link_auth *a, uint64_t id, const char *payload, uint8_t *out)
{
    size_t n = strlen(payload);

    be_put32(out, (uint32_t)(8 + n));
    be_put64(out + 4, id);
    memcpy(out + LINK_HDR, payload, n);
    la_seal(a, out, LINK_HDR + n, out + LINK_HDR + n);
    return LINK_HDR + n + LINK_TAG;
}

/* The key link_auth_set_key makes of key_a() in cluster "test" (what a
 * process of that cluster dials with), into k. */
static void cluster_key(uint8_t *k)
{
    link_auth_set_key(key_a(), "test");
    CHECK(link_auth_key(k));
    link_auth_set_key(NULL, NULL);
}

/* What one bad frame after a good one does: bad(0) alters a byte, bad(1)
 * replays the good frame, bad(2) seals a frame with a skipped sequence
 * number. The good one is echoed with a tag that holds; the bad one is
 * not handed to the server, and the server closes the connection. bad(3)
 * sends the good frame without the proof before it, bad(4) derives the
 * keys for another URL: both refused before anything is handed over. */
static void raw_case(const char *url, int bad)
{
    side srv;
    link_listener *ls = NULL;
    nng_stream_dialer *d = NULL;
    nng_aio *aio = NULL;
    nng_stream *s = NULL;
    uint8_t hello[LINK_HELLO], theirs[LINK_HELLO], good[64], other[64], back[64];
    int err = 0;

    uint8_t key[LINK_KEY_BYTES];
    cluster_key(key);
    side_init(&srv);
    link_auth_set_key(key_a(), "test");
    CHECK_INT(link_listen(url, echo_frame, on_closed, &srv, 0, &ls), 0);
    link_auth_set_key(NULL, NULL);
    link_auth *a = la_new(key, true, bad == 4 ? "ipc:///elsewhere" : url, hello, &err);
    CHECK(a != NULL);
    if (ls == NULL || a == NULL || (s = raw_dial(url, 10000, &d, &aio)) == NULL)
        goto out;
    CHECK_INT(raw_io(s, aio, hello, sizeof hello, true), 0);
    CHECK_INT(raw_io(s, aio, theirs, sizeof theirs, false), 0);
    CHECK_INT(la_hello(a, theirs), 0);
    if (bad >= 3) {
        size_t m = bad == 3 ? sealed(a, 41, "good", good) : sealed(a, 0, "", good);
        CHECK_INT(raw_io(s, aio, good, m, true), 0);
        CHECK(wait_side(&srv, 0, 1));
        CHECK_INT(srv.frames, 0);
        CHECK_INT(srv.err, SX_EPROTO);
        goto out;
    }
    size_t pn = sealed(a, 0, "", other); /* the proof */
    CHECK_INT(raw_io(s, aio, other, pn, true), 0);

    size_t n = sealed(a, 41, "good", good);
    CHECK_INT(raw_io(s, aio, good, n, true), 0);
    CHECK_INT(raw_io(s, aio, back, n, false), 0); /* the echo */
    CHECK(memcmp(back, good, LINK_HDR + 4) == 0);
    CHECK_INT(la_open(a, back, LINK_HDR + 4, back + LINK_HDR + 4), 0);
    CHECK(wait_side(&srv, 1, 0));

    size_t m = n;
    if (bad == 0) {
        m = sealed(a, 42, "evil", other);
        other[LINK_HDR + 1] ^= 1;
    } else if (bad == 1) {
        memcpy(other, good, n);
    } else {
        (void)sealed(a, 42, "skip", other); /* sequence 2, not sent */
        m = sealed(a, 43, "late", other);   /* sequence 3 */
    }
    CHECK_INT(raw_io(s, aio, other, m, true), 0);
    CHECK(wait_side(&srv, 1, 1));
    CHECK_INT(srv.frames, 1);
    CHECK_INT(srv.err, SX_EPROTO);
    CHECK(raw_io(s, aio, back, 1, false) != 0); /* closed: no reply */
out:
    if (s != NULL)
        nng_stream_free(s);
    nng_aio_free(aio);
    nng_stream_dialer_free(d);
    la_free(a);
    link_listener_close(ls);
}

/* A listener spoken by hand to a link_dial'ed link: the dialer's hello,
 * proof and frame arrive with tags that hold; then, reflect false, a reply
 * sealed as the listener's is handed to the dialer; reflect true, the
 * dialer's own frame sent back is refused (its keys differ by direction):
 * the dialer closes and is handed nothing. */
static void dialer_case(const char *url, bool reflect)
{
    side cli;
    nng_stream_listener *sl = NULL;
    nng_aio *acc = NULL, *aio = NULL;
    nng_stream *s = NULL;
    link_conn *l = NULL;
    uint8_t key[LINK_KEY_BYTES], mine[LINK_HELLO], theirs[LINK_HELLO];
    uint8_t proof[LINK_HDR + LINK_TAG], frame[LINK_HDR + 4 + LINK_TAG], reply[64];
    int err = 0;

    cluster_key(key);
    side_init(&cli);
    link_auth *a = la_new(key, false, url, mine, &err);
    CHECK(a != NULL);
    CHECK_INT(nng_stream_listener_alloc(&sl, url), 0);
    CHECK_INT(nng_aio_alloc(&acc, NULL, NULL), 0);
    CHECK_INT(nng_aio_alloc(&aio, NULL, NULL), 0);
    if (a == NULL || sl == NULL || acc == NULL || aio == NULL ||
        nng_stream_listener_listen(sl) != 0)
        goto out;
    nng_aio_set_timeout(acc, 10000);
    nng_aio_set_timeout(aio, 10000);
    nng_stream_listener_accept(sl, acc);
    link_auth_set_key(key_a(), "test");
    CHECK_INT(link_dial(url, 5000, cli_frame, on_closed, &cli, &l), 0);
    link_auth_set_key(NULL, NULL);
    nng_aio_wait(acc);
    CHECK_INT(nng_aio_result(acc), 0);
    s = nng_aio_get_output(acc, 0);
    if (l == NULL || s == NULL)
        goto out;
    CHECK_INT(link_send(l, 9, (const uint8_t *)"ping", 4), 0); /* waits for the hello */
    CHECK_INT(raw_io(s, aio, mine, sizeof mine, true), 0);
    CHECK_INT(raw_io(s, aio, theirs, sizeof theirs, false), 0);
    CHECK_INT(la_hello(a, theirs), 0);
    CHECK_INT(raw_io(s, aio, proof, sizeof proof, false), 0);
    CHECK(be_get32(proof) == 8 && be_get64(proof + 4) == 0);
    CHECK_INT(la_open(a, proof, LINK_HDR, proof + LINK_HDR), 0);
    CHECK_INT(raw_io(s, aio, frame, sizeof frame, false), 0);
    CHECK(be_get64(frame + 4) == 9 && memcmp(frame + LINK_HDR, "ping", 4) == 0);
    CHECK_INT(la_open(a, frame, LINK_HDR + 4, frame + LINK_HDR + 4), 0);
    if (reflect) {
        CHECK_INT(raw_io(s, aio, frame, sizeof frame, true), 0);
        CHECK(wait_side(&cli, 0, 1));
        CHECK_INT(cli.frames, 0);
        CHECK_INT(cli.err, SX_EPROTO);
    } else {
        size_t n = sealed(a, 9, "pong", reply);
        CHECK_INT(raw_io(s, aio, reply, n, true), 0);
        CHECK(wait_side(&cli, 1, 0));
        CHECK_INT(cli.closed, 0);
    }
out:
    close_wait(l, &cli);
    if (s != NULL)
        nng_stream_free(s);
    nng_aio_free(aio);
    nng_aio_free(acc);
    nng_stream_listener_free(sl);
    la_free(a);
}

/* A peer that sends something else than a hello to a keyed listener: the
 * link closes, nothing is handed over. */
static void no_hello_case(const char *url)
{
    side srv;
    link_listener *ls = NULL;
    nng_stream_dialer *d = NULL;
    nng_aio *aio = NULL;
    uint8_t junk[LINK_HELLO];

    memset(junk, 'x', sizeof junk);
    side_init(&srv);
    link_auth_set_key(key_a(), "test");
    CHECK_INT(link_listen(url, echo_frame, on_closed, &srv, 0, &ls), 0);
    link_auth_set_key(NULL, NULL);
    nng_stream *s = ls != NULL ? raw_dial(url, 10000, &d, &aio) : NULL;
    if (s != NULL) {
        CHECK_INT(raw_io(s, aio, junk, sizeof junk, true), 0);
        CHECK(wait_side(&srv, 0, 1));
        CHECK_INT(srv.frames, 0);
        CHECK_INT(srv.err, SX_EPROTO);
        nng_stream_free(s);
    }
    nng_aio_free(aio);
    nng_stream_dialer_free(d);
    link_listener_close(ls);
}

/* An accepted link whose peer sends part of a hello and stalls is closed
 * at the proof's deadline (SHARDEX_LINK_PROOF_MS, 300 ms here); one that
 * proved the key, accepted earlier, is still open once that has happened
 * (its own deadline passed before). */
static void deadline_case(const char *url)
{
    side srv, cli;
    link_listener *ls = NULL;
    link_conn *l = NULL;
    nng_stream_dialer *d = NULL;
    nng_aio *aio = NULL;
    uint8_t part[3] = { 'S', 'X', 'L' };

    side_init(&srv);
    side_init(&cli);
    CHECK_INT(setenv("SHARDEX_LINK_PROOF_MS", "300", 1), 0);
    link_auth_set_key(key_a(), "test");
    CHECK_INT(link_listen(url, echo_frame, on_closed, &srv, 0, &ls), 0);
    CHECK_INT(unsetenv("SHARDEX_LINK_PROOF_MS"), 0);
    CHECK_INT(link_dial(url, 5000, cli_frame, on_closed, &cli, &l), 0);
    link_auth_set_key(NULL, NULL);
    if (ls == NULL || l == NULL)
        goto out;
    CHECK_INT(link_send(l, 1, (const uint8_t *)"a", 1), 0);
    CHECK(wait_side(&cli, 1, 0)); /* proved and answered */
    nng_stream *s = raw_dial(url, 10000, &d, &aio);
    if (s != NULL) {
        CHECK_INT(raw_io(s, aio, part, sizeof part, true), 0);
        CHECK(wait_side(&srv, 1, 1)); /* the stalled one closed */
        CHECK_INT(srv.err, SX_EPROTO);
        nng_stream_free(s);
    }
    /* the proved link was accepted before the stalled one, so its own
     * deadline has passed too by the time the stalled one is closed: it
     * must still be open and answer */
    CHECK_INT(link_send(l, 2, (const uint8_t *)"b", 1), 0);
    CHECK(wait_side(&cli, 2, 0));
    CHECK_INT(srv.closed, 1);
out:
    close_wait(l, &cli);
    nng_aio_free(aio);
    nng_stream_dialer_free(d);
    link_listener_close(ls);
}

int main(void)
{
    char base[128], url[256];

    if (proto_init() != 0 || scratch_make("sx-link-auth", base, sizeof(base)) == NULL) {
        fprintf(stderr, "link_auth_test: set-up failed\n");
        return 1;
    }
    const struct {
        const char *name;
        const uint8_t *lkey, *dkey;
        const char *dc;
    } pairs[] = {
        { "same", key_a(), key_a(), "c1" }, /* the control: echoed */
        { "other", key_a(), key_b(), "c1" }, { "cluster", key_a(), key_a(), "c2" },
        { "nokey", key_a(), NULL, "c1" },    { "nolisten", NULL, key_a(), "c1" },
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        snprintf(url, sizeof url, "ipc://%s/%s.sock", base, pairs[i].name);
        pair_case(url, pairs[i].lkey, "c1", pairs[i].dkey, pairs[i].dc);
        unlink(url + 6);
    }
    for (int reflect = 0; reflect < 2; reflect++) {
        snprintf(url, sizeof url, "ipc://%s/dialer%d.sock", base, reflect);
        dialer_case(url, reflect);
        unlink(url + 6);
    }
    for (int bad = 0; bad < 5; bad++) {
        snprintf(url, sizeof url, "ipc://%s/raw%d.sock", base, bad);
        raw_case(url, bad);
        unlink(url + 6);
    }
    snprintf(url, sizeof url, "ipc://%s/junk.sock", base);
    no_hello_case(url);
    unlink(url + 6);
    snprintf(url, sizeof url, "ipc://%s/deadline.sock", base);
    deadline_case(url);
    unlink(url + 6);
    scratch_remove(base);
    return CHECK_DONE();
}
