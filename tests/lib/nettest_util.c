/*
 * nettest_util.c — the helpers the messaging runtime's tests share (declared,
 * with their contracts, in nettest_util.h): the program-wide check tally,
 * the g_mu-guarded state and waits on it, request builders and reply
 * checkers, the test servers' handler, the logging relay, calls through a
 * net_peer, and the temporary directory for the servers' ipc sockets.
 * Built as the library test_support (tests/CMakeLists.txt).
 */
#define CHECK_TALLY_DEFINE /* the program's one check tally lives here */
#include "nettest_util.h"
#include "log.h"
#include "scratch.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- shared state: everything below is guarded by g_mu, changes signal g_cv ---- */

pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t g_cv;

const char *const kind_names[K_PING] = { "echo", "gate0", "gate1", "err",   "toobig",
                                         "big",  "quick", "defer", "maybe", "dsync" };

int g_runs[K_N];
int g_gate_open[2];
int g_gate_waiting[2];
int g_gate_timeouts;
static int g_quick_active; /* quick handlers running now */
int g_quick_max;
pthread_t g_quick_thr[64];
int g_quick_n;
int g_finished;

static struct timespec deadline_in(int ms)
{
    struct timespec ts;

    os_deadline_in(&ts, CLOCK_MONOTONIC, ms);
    return ts;
}

/* Waits until *v >= want (read under g_mu) or ms pass; says which. */
bool wait_ge_for(const int *v, int want, int ms)
{
    struct timespec dl = deadline_in(ms);
    bool ok;

    pthread_mutex_lock(&g_mu);
    while (*v < want && pthread_cond_timedwait(&g_cv, &g_mu, &dl) != ETIMEDOUT)
        ;
    ok = *v >= want;
    pthread_mutex_unlock(&g_mu);
    return ok;
}

/* Waits until *v >= want or WAIT_MS pass; says which. */
bool wait_ge(const int *v, int want)
{
    return wait_ge_for(v, want, WAIT_MS);
}

/* Waits until *v <= want or WAIT_MS pass; says which. */
bool wait_le(const int *v, int want)
{
    struct timespec dl = deadline_in(WAIT_MS);
    bool ok;

    pthread_mutex_lock(&g_mu);
    while (*v > want && pthread_cond_timedwait(&g_cv, &g_mu, &dl) != ETIMEDOUT)
        ;
    ok = *v <= want;
    pthread_mutex_unlock(&g_mu);
    return ok;
}

int get_int(const int *v)
{
    int x;

    pthread_mutex_lock(&g_mu);
    x = *v;
    pthread_mutex_unlock(&g_mu);
    return x;
}

void set_int(int *v, int x)
{
    pthread_mutex_lock(&g_mu);
    *v = x;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
}

/* Forgets what the last scenario left (its handlers must be out of the gates),
 * the program's own state too (nettest_reset_local). */
void reset_state(void)
{
    CHECK(wait_le(&g_gate_waiting[0], 0));
    CHECK(wait_le(&g_gate_waiting[1], 0));
    pthread_mutex_lock(&g_mu);
    memset(g_runs, 0, sizeof(g_runs));
    g_gate_open[0] = g_gate_open[1] = 0;
    g_quick_active = g_quick_max = g_quick_n = 0;
    g_finished = 0;
    nettest_reset_local();
    pthread_mutex_unlock(&g_mu);
}

/* ---- requests and replies ---- */

static mp_span S(const char *s)
{
    mp_span b = { (const uint8_t *)s, strlen(s) };
    return b;
}

static uint64_t ver_of(int id)
{
    return (uint64_t)id * 7u + 3u;
}
static uint8_t fill_of(int id)
{
    return (uint8_t)(id * 31 + 0x5a);
}
int err_of(int id)
{
    static const int codes[] = { SX_ENOTFOUND, SX_EINVAL, SX_EKEY };
    return codes[id % 3];
}

/* The key of request id: the msgpack str "k<id>". */
static void put_key(mp_buf *b, int id)
{
    char k[24];

    snprintf(k, sizeof(k), "k%d", id);
    mp_put_cstr(b, k);
}

/* The id in key raw (a msgpack str "k<digits>"), or -1. */
int key_id(mp_span raw)
{
    mp_cur c = mp_cur_make(raw.p, raw.n);
    mp_span s;
    int id = 0;

    if (mp_read_str(&c, &s) != 0 || mp_left(&c) != 0 || s.n < 2 || s.n > 8 || s.p[0] != 'k')
        return -1;
    for (size_t i = 1; i < s.n; i++) {
        if (s.p[i] < '0' || s.p[i] > '9')
            return -1;
        id = id * 10 + (s.p[i] - '0');
    }
    return id;
}

/* A request frame of type t (GET, or DELETE: the same fields, but never
 * quick) for table (a kind name) and key "k<id>"; malloc'd. */
uint8_t *make_req_t(msg_type t, const char *table, int id, size_t *n)
{
    mp_buf kb, b;
    msg_GET_req g;
    msg_DELETE_req d;
    uint8_t *f = NULL;
    int rc;

    mp_buf_init(&kb);
    mp_buf_init(&b);
    put_key(&kb, id);
    memset(&g, 0, sizeof(g));
    memset(&d, 0, sizeof(d));
    g.table = d.table = S(table);
    g.key.p = d.key.p = (const uint8_t *)kb.sb.data;
    g.key.n = d.key.n = kb.sb.size;
    rc = t == MSG_DELETE ? msg_encode_req(MSG_DELETE, &d, &b) : msg_encode_req(MSG_GET, &g, &b);
    if (kb.oom || rc != 0 || mp_buf_take(&b, &f, n) != 0) {
        fprintf(stderr, "make_req: out of memory\n");
        exit(1);
    }
    mp_buf_free(&kb);
    mp_buf_free(&b);
    return f;
}

uint8_t *make_req(const char *table, int id, size_t *n)
{
    return make_req_t(MSG_GET, table, id, n);
}

/* Says whether reply frame r..n is a DELETE echo's answer to id. */
bool is_del_echo(const uint8_t *r, size_t n, int id)
{
    msg_DELETE_rep rep;
    bool ok;

    if (r == NULL)
        return false;
    ok = msg_decode_rep(MSG_DELETE, r, n, &rep, NULL, 0) == 0 && rep.version == ver_of(id);
    msg_free_rep(MSG_DELETE, &rep);
    if (!ok)
        fprintf(stderr, "DELETE reply for k%d is wrong\n", id);
    return ok;
}

/* Says whether reply frame r..n is kind echo's answer to id. */
bool is_echo(const uint8_t *r, size_t n, int id)
{
    msg_GET_rep rep;
    char why[128];
    int rc;
    bool ok;

    if (r == NULL)
        return false;
    rc = msg_decode_rep(MSG_GET, r, n, &rep, why, sizeof(why));
    ok = rc == 0 && key_id(rep.item) == id && rep.version == ver_of(id);
    if (!ok)
        fprintf(stderr, "reply for k%d: rc %d (%s), item id %d, version %llu\n", id, rc, why,
                rc == 0 ? key_id(rep.item) : -1, (unsigned long long)rep.version);
    msg_free_rep(MSG_GET, &rep);
    return ok;
}

/* Says whether reply frame r..n is the error reply code with message msg. */
bool is_err(const uint8_t *r, size_t n, msg_type t, int code, const char *msg)
{
    union {
        msg_GET_rep get;
        msg_DELETE_rep del;
        msg_PING_rep ping;
        msg_MULTI_rep multi;
    } rep;
    char why[128];
    int rc;

    if (r == NULL)
        return false;
    rc = msg_decode_rep(t, r, n, &rep, why, sizeof(why));
    msg_free_rep(t, &rep);
    if (rc == code && (msg == NULL || strcmp(why, msg) == 0))
        return true;
    fprintf(stderr, "error reply: rc %d '%s', want %d '%s'\n", rc, why, code, msg ? msg : "*");
    return false;
}

/* Says whether reply frame r..n is kind big's full answer to id. */
bool is_big(const uint8_t *r, size_t n, int id)
{
    msg_GET_rep rep;
    mp_cur c;
    mp_span bin = { NULL, 0 };
    bool ok;

    if (r == NULL)
        return false;
    ok = msg_decode_rep(MSG_GET, r, n, &rep, NULL, 0) == 0 && rep.version == ver_of(id);
    if (ok) {
        c = mp_cur_make(rep.item.p, rep.item.n);
        ok = mp_read_bin(&c, &bin) == 0 && bin.n == BIG_SIZE;
    }
    for (size_t i = 0; ok && i < bin.n; i++)
        ok = bin.p[i] == fill_of(id);
    if (!ok)
        fprintf(stderr, "big reply for k%d: %zu bytes, item %zu bytes\n", id, n, bin.n);
    msg_free_rep(MSG_GET, &rep);
    return ok;
}

/* ---- the servers' handler ---- */

static void gate_wait(int g)
{
    struct timespec dl = deadline_in(WAIT_MS);

    pthread_mutex_lock(&g_mu);
    g_gate_waiting[g]++;
    pthread_cond_broadcast(&g_cv);
    while (!g_gate_open[g] && pthread_cond_timedwait(&g_cv, &g_mu, &dl) != ETIMEDOUT)
        ;
    if (!g_gate_open[g])
        g_gate_timeouts++;
    g_gate_waiting[g]--;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
}

static void count_run(int kind)
{
    pthread_mutex_lock(&g_mu);
    g_runs[kind]++;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
}

static void quick_enter(void)
{
    pthread_mutex_lock(&g_mu);
    if (++g_quick_active > g_quick_max)
        g_quick_max = g_quick_active;
    if (g_quick_n < (int)(sizeof(g_quick_thr) / sizeof(g_quick_thr[0])))
        g_quick_thr[g_quick_n++] = pthread_self();
    pthread_mutex_unlock(&g_mu);
}

static void quick_leave(void)
{
    pthread_mutex_lock(&g_mu);
    g_quick_active--;
    pthread_mutex_unlock(&g_mu);
}

static void reply_echo(msg_type t, const msg_GET_req *q, int id, mp_buf *out)
{
    msg_GET_rep r;

    if (t == MSG_DELETE) {
        msg_DELETE_rep d;

        memset(&d, 0, sizeof(d));
        d.version = ver_of(id);
        msg_encode_rep(MSG_DELETE, &d, out);
        return;
    }
    memset(&r, 0, sizeof(r));
    r.item = q->key;
    r.version = ver_of(id);
    msg_encode_rep(MSG_GET, &r, out);
}

static void reply_big(int id, mp_buf *out)
{
    msg_GET_rep r;
    mp_buf item;
    uint8_t *data = malloc(BIG_SIZE);

    if (data == NULL) {
        msg_encode_err(MSG_GET, SX_ENOMEM, "test handler out of memory", out);
        return;
    }
    memset(data, fill_of(id), BIG_SIZE);
    mp_buf_init(&item);
    mp_put_bin(&item, data, BIG_SIZE);
    free(data);
    memset(&r, 0, sizeof(r));
    r.item.p = (const uint8_t *)item.sb.data;
    r.item.n = item.sb.size;
    r.version = ver_of(id);
    msg_encode_rep(MSG_GET, &r, out);
    mp_buf_free(&item);
}

void handler(void *arg, const uint8_t *req, size_t n, mp_buf *out)
{
    msg_type t;
    int is_reply = 0, kind = -1, id = -1;
    msg_GET_req q;
    char msg[64];

    (void)arg;
    if (msg_peek(req, n, &t, &is_reply) != 0 || is_reply) {
        count_run(K_BAD);
        msg_encode_err(MSG_PING, SX_EPROTO, "bad frame", out);
        return;
    }
    if (t == MSG_PING) {
        msg_PING_rep p;

        count_run(K_PING);
        memset(&p, 0, sizeof(p));
        p.role = S("test");
        p.name = S("multi");
        msg_encode_rep(MSG_PING, &p, out);
        return;
    }
    memset(&q, 0, sizeof(q));
    if (t == MSG_DELETE) {
        msg_DELETE_req d;

        if (msg_decode_req(MSG_DELETE, req, n, &d) == 0) {
            q.table = d.table;
            q.key = d.key;
            kind = -2; /* decoded */
        }
    } else if (t == MSG_GET && msg_decode_req(MSG_GET, req, n, &q) == 0) {
        kind = -2;
    }
    if (kind != -2) {
        count_run(K_BAD);
        msg_encode_err(t, SX_EINVAL, "unexpected request", out);
        return;
    }
    kind = -1;
    for (int k = 0; k < (int)(sizeof(kind_names) / sizeof(kind_names[0])); k++)
        if (mp_span_eq_cstr(q.table, kind_names[k]))
            kind = k;
    id = key_id(q.key);
    if (kind < 0 || id < 0) {
        count_run(K_BAD);
        msg_encode_err(t, SX_EINVAL, "unknown table or key", out);
        return;
    }
    count_run(kind);
    switch (kind) {
    case K_GATE0:
    case K_GATE1:
        gate_wait(kind - K_GATE0);
        reply_echo(t, &q, id, out);
        break;
    case K_ERR:
        snprintf(msg, sizeof(msg), "err k%d", id);
        msg_encode_err(t, err_of(id), msg, out);
        break;
    case K_TOOBIG: msg_encode_err(t, SX_ETOOBIG, "handler says too big", out); break;
    case K_BIG: reply_big(id, out); break;
    case K_QUICK:
        quick_enter();
        reply_echo(t, &q, id, out);
        quick_leave();
        break;
    default: reply_echo(t, &q, id, out); break;
    }
}

/* GET is quick, DELETE (the same requests, for the gates) is not. */
bool quick_get(msg_type t)
{
    return t == MSG_GET;
}

/* ---- a relay that logs the frames a peer sends ---- */

static void *proxy_main(void *arg)
{
    proxy *px = arg;

    for (;;) {
        nng_msg *m = NULL;
        uint8_t *r = NULL;
        size_t rn = 0;
        msg_type t;
        int is_reply = 0, inner = 0;
        int rv = nng_recvmsg(px->front, &m, 0);

        if (rv == NNG_ECLOSED)
            return NULL;
        if (rv != 0)
            continue;
        if (msg_peek(nng_msg_body(m), nng_msg_len(m), &t, &is_reply) == 0 && !is_reply &&
            t == MSG_MULTI) {
            msg_MULTI_req rq;
            inner = msg_decode_req(MSG_MULTI, nng_msg_body(m), nng_msg_len(m), &rq) == 0
                        ? (int)rq.frames.n
                        : -1;
            msg_free_req(MSG_MULTI, &rq);
        }
        pthread_mutex_lock(&g_mu);
        if (px->nframes < PROXY_LOG)
            px->inner[px->nframes] = inner;
        px->nframes++;
        pthread_cond_broadcast(&g_cv);
        pthread_mutex_unlock(&g_mu);
        rv = net_call(px->back, nng_msg_body(m), nng_msg_len(m), WAIT_MS, &r, &rn);
        if (rv == 0) {
            nng_msg_clear(m);
            rv = nng_msg_append(m, r, rn);
            if (rv == 0)
                rv = nng_sendmsg(px->front, m, 0);
            free(r);
        }
        if (rv != 0) {
            nng_msg_free(m);
            pthread_mutex_lock(&g_mu);
            px->failed++;
            pthread_mutex_unlock(&g_mu);
        }
    }
}

int proxy_start(proxy *px, const char *front_url, const char *back_url)
{
    memset(px, 0, sizeof(*px));
    if (net_listen(front_url, &px->front) != 0)
        return -1;
    if (net_dial(back_url, &px->back) != 0) {
        nng_close(px->front);
        return -1;
    }
    if (pthread_create(&px->thr, NULL, proxy_main, px) != 0) {
        nng_close(px->front);
        nng_close(px->back);
        return -1;
    }
    return 0;
}

void proxy_reset(proxy *px)
{
    pthread_mutex_lock(&g_mu);
    px->nframes = 0;
    px->failed = 0;
    memset(px->inner, 0, sizeof(px->inner));
    pthread_mutex_unlock(&g_mu);
}

void proxy_stop(proxy *px)
{
    nng_close(px->front);
    pthread_join(px->thr, NULL);
    nng_close(px->back);
}

/* ---- peer calls ---- */

void pcall_done(void *arg, int err, const uint8_t *resp, size_t n)
{
    pcall *c = arg;
    uint8_t *copy = NULL;

    if (err == 0 && resp != NULL) {
        copy = malloc(n ? n : 1);
        if (copy != NULL)
            memcpy(copy, resp, n);
    }
    pthread_mutex_lock(&g_mu);
    if (++c->ndone == 1) {
        c->err = err;
        c->resp = copy;
        c->resp_n = n;
        copy = NULL;
    }
    g_finished++;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
    free(copy);
}

void pcall_init_t(pcall *c, msg_type t, const char *table, int id)
{
    memset(c, 0, sizeof(*c));
    c->id = id;
    c->req = make_req_t(t, table, id, &c->req_n);
    c->submit_rc = -1;
}

void pcall_init(pcall *c, const char *table, int id)
{
    pcall_init_t(c, MSG_GET, table, id);
}

void check_calls_ok(const pcall *c, int n)
{
    for (int i = 0; i < n; i++) {
        CHECK_INT(c[i].submit_rc, 0);
        CHECK_INT(c[i].ndone, 1);
        CHECK_INT(c[i].err, 0);
    }
}

void pcall_submit(net_peer *p, pcall *c)
{
    c->submit_rc = net_peer_submit(p, c->req, c->req_n, WAIT_MS, pcall_done, c);
}

void pcall_free(pcall *c, int n)
{
    for (int i = 0; i < n; i++) {
        free(c[i].req);
        free(c[i].resp);
    }
}

/* Opens a REQ socket to url and a peer on it. */
net_peer *peer_open(const char *url, int max_frames, nng_socket *sock)
{
    net_peer *p = NULL;

    if (net_dial(url, sock) != 0) {
        fprintf(stderr, "dial %s failed\n", url);
        exit(1);
    }
    if (net_peer_open(*sock, max_frames, &p) != 0) {
        fprintf(stderr, "net_peer_open failed\n");
        exit(1);
    }
    return p;
}

void peer_done(net_peer *p, nng_socket sock)
{
    net_peer_close(p);
    nng_close(sock);
}
/* ---- MULTI frames on a raw REQ socket ---- */

/* Encodes a MULTI request of frames f[0..n); malloc'd. */
uint8_t *make_multi(const mp_span *f, uint32_t n, size_t *len)
{
    msg_MULTI_req rq;
    mp_buf b;
    uint8_t *out = NULL;

    memset(&rq, 0, sizeof(rq));
    rq.frames.n = n;
    rq.frames.v = (mp_span *)f;
    mp_buf_init(&b);
    if (msg_encode_req(MSG_MULTI, &rq, &b) != 0 || mp_buf_take(&b, &out, len) != 0) {
        fprintf(stderr, "make_multi: out of memory\n");
        exit(1);
    }
    mp_buf_free(&b);
    return out;
}

/* Sends frame f..n on s; returns the reply (malloc'd) or NULL after a CHECK failure. */
uint8_t *raw_call(nng_socket s, const uint8_t *f, size_t n, size_t *rn)
{
    uint8_t *r = NULL;
    int rc = net_call(s, f, n, WAIT_MS, &r, rn);

    CHECK_INT(rc, 0);
    return rc == 0 ? r : NULL;
}

/* Sends a MULTI of the n frames f and checks the reply holds n frames;
 * returns the reply (decoded into rep, release both) or NULL. */
uint8_t *raw_multi(nng_socket s, const mp_span *f, uint32_t n, msg_MULTI_rep *rep)
{
    size_t len = 0, rn = 0;
    uint8_t *m = make_multi(f, n, &len);
    uint8_t *r = raw_call(s, m, len, &rn);
    int rc;

    free(m);
    memset(rep, 0, sizeof(*rep));
    if (r == NULL)
        return NULL;
    rc = msg_decode_rep(MSG_MULTI, r, rn, rep, NULL, 0);
    CHECK_INT(rc, 0);
    CHECK_INT(rep->frames.n, n);
    if (rc != 0 || rep->frames.n != n) {
        msg_free_rep(MSG_MULTI, rep);
        free(r);
        return NULL;
    }
    return r;
}

/* ---- the program's run ---- */

const char *nettest_setup(const char *prefix, char *buf, size_t n)
{
    const char *base = scratch_make(prefix, buf, n);
    pthread_condattr_t ca;

    if (base == NULL)
        return NULL;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g_cv, &ca);
    pthread_condattr_destroy(&ca);
    return base;
}

void nettest_teardown(const char *base)
{
    pthread_cond_destroy(&g_cv);
    scratch_remove(base);
}
