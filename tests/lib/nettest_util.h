/*
 * nettest_util.h — what the runtime's network tests (multi_test.c,
 * defer_test.c) share: an assertion kit whose tally spans files, the
 * shared state (guarded by g_mu, changes signalled on g_cv) with waits on
 * it, request builders and reply checkers, the test servers' handler, a
 * logging relay ("proxy") and helpers for calls through a net_peer.
 *
 * The handler answers GET (and DELETE, the same fields but never quick) by
 * the table name, one of kind_names: echo the key, wait on a gate, fail
 * with a chosen code, answer ~6 MiB, record quick frames; "defer", "maybe"
 * and "dsync" it answers as echo (defer_test's defer function takes or
 * answers most of those before the handler would run). The relay is a REP
 * socket forwarding each frame to a server, logging the frames a peer
 * really sends.
 *
 * Each program using this defines nettest_reset_local() (below) and calls
 * nettest_setup() first and nettest_teardown() last in main().
 */
#ifndef SX_NETTEST_UTIL_H
#define SX_NETTEST_UTIL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "msg.h"
#include "net.h"
#include "sx_errors.h"

#define CHECK_TALLY_SHARED /* the helpers below CHECK too */
#include "check.h"

#define NWORKERS 4
#define WAIT_MS 10000 /* every wait on a condition gives up after this */
#define BIG_SIZE (6u * 1024u * 1024u)

/* ---- shared state: everything below is guarded by g_mu, changes signal g_cv ---- */

extern pthread_mutex_t g_mu;
extern pthread_cond_t g_cv; /* on CLOCK_MONOTONIC, set up by nettest_setup */

/* request kinds, chosen by the request's table name (kind_names[kind]);
 * K_PING and K_BAD have no table: a PING, and a frame the handler refused */
enum {
    K_ECHO,
    K_GATE0,
    K_GATE1,
    K_ERR,
    K_TOOBIG,
    K_BIG,
    K_QUICK,
    K_DEFER,
    K_MAYBE,
    K_DSYNC,
    K_PING,
    K_BAD,
    K_N
};
extern const char *const kind_names[K_PING];

extern int g_runs[K_N]; /* handler runs per kind */
extern int g_gate_open[2];
extern int g_gate_waiting[2];     /* handlers waiting on each gate now */
extern int g_gate_timeouts;       /* a gate was never opened: a test bug or hang */
extern int g_quick_max;           /* most quick handlers running at once */
extern pthread_t g_quick_thr[64]; /* the threads that ran quick handlers, in turn */
extern int g_quick_n;             /* entries of g_quick_thr */
extern int g_finished;            /* peer done callbacks run */

/* Waits until *v >= want (read under g_mu) or ms pass; returns whether it
 * got there. v must be a g_mu-guarded int. Any thread but g_mu's holder. */
bool wait_ge_for(const int *v, int want, int ms);

/* wait_ge_for with WAIT_MS. */
bool wait_ge(const int *v, int want);

/* Waits until *v <= want or WAIT_MS pass; returns whether it got there. */
bool wait_le(const int *v, int want);

/* Reads the g_mu-guarded int *v under g_mu. */
int get_int(const int *v);

/* Sets the g_mu-guarded int *v to x under g_mu and wakes g_cv's waiters. */
void set_int(int *v, int x);

/* Forgets what the last scenario left: waits (CHECKed) until no handler
 * waits on a gate, then, under g_mu, clears the run counts, gates, quick
 * records and g_finished, and calls nettest_reset_local(). Main thread. */
void reset_state(void);

/* Defined by each program using this file: forgets that program's own
 * g_mu-guarded state (it may CHECK what must be left). Called by
 * reset_state with g_mu held; must not take g_mu. */
void nettest_reset_local(void);

/* ---- requests and replies ---- */

/* The error code the handler's "err" kind answers for key id. */
int err_of(int id);

/* The id in key raw (a msgpack str "k<digits>"), or -1. */
int key_id(mp_span raw);

/* A request frame of type t (MSG_GET, or MSG_DELETE: the same fields, but
 * never quick) for table (a kind name) and key "k<id>"; stores its length
 * in *n. Returns it malloc'd (the caller frees it); exits on out of memory. */
uint8_t *make_req_t(msg_type t, const char *table, int id, size_t *n);

/* make_req_t(MSG_GET, table, id, n). */
uint8_t *make_req(const char *table, int id, size_t *n);

/* A MULTI request of frames f[0..n) (borrowed: only read); stores its
 * length in *len. Returns it malloc'd (the caller frees it); exits on out
 * of memory. */
uint8_t *make_multi(const mp_span *f, uint32_t n, size_t *len);

/* Whether reply frame r..n (NULL: no) is the handler's DELETE echo answer
 * to id; says what is wrong on stderr if not. */
bool is_del_echo(const uint8_t *r, size_t n, int id);

/* Whether reply frame r..n (NULL: no) is the handler's GET echo answer to
 * id; says what is wrong on stderr if not. */
bool is_echo(const uint8_t *r, size_t n, int id);

/* Whether reply frame r..n (NULL: no) is an error reply of type t with
 * code and, unless msg is NULL, message msg; says what it is on stderr if
 * not. */
bool is_err(const uint8_t *r, size_t n, msg_type t, int code, const char *msg);

/* Whether reply frame r..n (NULL: no) is kind big's full answer to id (a
 * bin of BIG_SIZE bytes of id's fill); says what is wrong on stderr if not. */
bool is_big(const uint8_t *r, size_t n, int id);

/* Sends frame f..n on REQ socket s and waits (WAIT_MS) for the reply.
 * Returns the reply, malloc'd (the caller frees it), its length in *rn; or
 * NULL after a CHECK failure. */
uint8_t *raw_call(nng_socket s, const uint8_t *f, size_t n, size_t *rn);

/* Sends a MULTI of the n frames f on s and CHECKs the reply decodes and
 * holds n frames. Returns the reply frame, malloc'd, with rep decoded from
 * it (borrowing from it): the caller releases rep (msg_free_rep MSG_MULTI)
 * then frees the frame. NULL on failure (rep then needs no release). */
uint8_t *raw_multi(nng_socket s, const mp_span *f, uint32_t n, msg_MULTI_rep *rep);

/* ---- the servers' handler ---- */

/* The net_handler of every test server: answers req..n into out by kind
 * (see the file comment), counts runs in g_runs. arg is not used. Runs on
 * server workers or fibers, any number at once. */
void handler(void *arg, const uint8_t *req, size_t n, mp_buf *out);

/* The quick predicate of the test servers: GET is quick, DELETE (the same
 * requests, for the gates) is not. */
bool quick_get(msg_type t);

/* ---- a relay that logs the frames a peer sends ---- */

#define PROXY_LOG 64

typedef struct proxy {
    nng_socket front; /* REP, where the peer dials */
    nng_socket back;  /* REQ to the server */
    pthread_t thr;
    int nframes;          /* under g_mu */
    int inner[PROXY_LOG]; /* per frame: inner frames of a MULTI, 0 for a plain one */
    int failed;           /* forwards that failed */
} proxy;

/* Starts relay px: listens on front_url, forwards each frame to back_url
 * one at a time, on a thread of its own. Returns 0, or -1 with nothing
 * left open. Stop it with proxy_stop. */
int proxy_start(proxy *px, const char *front_url, const char *back_url);

/* Forgets the frames px logged (under g_mu). */
void proxy_reset(proxy *px);

/* Closes px's sockets and joins its thread. */
void proxy_stop(proxy *px);

/* ---- peer calls ---- */

/* One call through a net_peer: its request (owned), and what its done
 * callback got (a copy of the reply, owned). */
typedef struct pcall {
    int id;
    uint8_t *req;
    size_t req_n;
    int submit_rc;
    int ndone; /* under g_mu, from here on */
    int err;
    uint8_t *resp;
    size_t resp_n;
} pcall;

/* The net_peer done callback for pcall arg: on the first run keeps err and
 * a copy of resp in it; counts every run (ndone, g_finished), wakes g_cv. */
void pcall_done(void *arg, int err, const uint8_t *resp, size_t n);

/* Sets up c for a make_req_t(t, table, id) request, not yet submitted
 * (submit_rc -1). Release with pcall_free. */
void pcall_init_t(pcall *c, msg_type t, const char *table, int id);

/* pcall_init_t(c, MSG_GET, table, id). */
void pcall_init(pcall *c, const char *table, int id);

/* With g_mu held: CHECKs that each of c[0..n) was submitted and completed
 * exactly once, without error. */
void check_calls_ok(const pcall *c, int n);

/* Submits c on p (WAIT_MS, done: pcall_done); the result in c->submit_rc. */
void pcall_submit(net_peer *p, pcall *c);

/* Frees the requests and replies of c[0..n) (not c itself). Their done
 * callbacks must have run, or never be going to. */
void pcall_free(pcall *c, int n);

/* Dials url into *sock and opens a peer with max_frames contexts on it.
 * Exits on failure. Release both with peer_done. */
net_peer *peer_open(const char *url, int max_frames, nng_socket *sock);

/* Closes peer p, then its socket sock. */
void peer_done(net_peer *p, nng_socket sock);

/* ---- the program's run ---- */

/* Sets up g_cv and makes a fresh directory for the servers' ipc sockets
 * (scratch.h: scratch_make(prefix, buf, n)). Returns buf, or NULL (said on
 * stderr) when the directory could not be made. First in main. */
const char *nettest_setup(const char *prefix, char *buf, size_t n);

/* Removes directory base with all in it and destroys g_cv. Last in main,
 * once every thread using g_cv is gone. */
void nettest_teardown(const char *base);

#endif
