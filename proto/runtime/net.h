/*
 * net.h — nng plumbing shared by every process: sockets with a maximum
 * message size, request/reply calls with timeouts, parallel fan-out, and a
 * multi-worker server loop over REP contexts.
 */
#ifndef SX_NET_H
#define SX_NET_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <nng/nng.h>
#include "mp.h"
#include "msg.h"

#define SX_MAX_FRAME (16u * 1024u * 1024u) /* NNG_OPT_RECVMAXSZ on every socket */
/* The most bytes a request may have. nng's REQ protocol sends a 4-byte
 * request id before them and the receiver's NNG_OPT_RECVMAXSZ counts it,
 * so a longer request would be dropped unanswered and its caller would
 * wait out its timeout; every sender checks this one limit, whatever the
 * transport. */
#define NET_REQ_MAX (SX_MAX_FRAME - 4u)
#define SX_CALL_TIMEOUT_MS 10000

/* Maps an nng error to an sx_err: 0 stays 0; timeouts SX_ETIMEDOUT;
 * out of memory SX_ENOMEM; closed, refused or broken connections
 * SX_EUNAVAIL; anything else SX_ENET. */
int net_map_nng(int rv);

/* Sets *m to a new message holding a copy of the n bytes at p, allocated
 * at its size once (nng_msg_alloc of n would zero them first), or to NULL.
 * Returns 0 or an nng error. */
int net_msg_copy(nng_msg **m, const void *p, size_t n);

/* Opens a REP socket listening on url. Returns 0, SX_ENET (bad or busy url). */
int net_listen(const char *url, nng_socket *out);

/* Opens a REQ socket dialing url in the background (the peer may come up
 * later). Returns 0 or SX_ENET (a malformed url); logs nothing, since the
 * client library, which must not write to its host's stderr, uses it. */
int net_dial(const char *url, nng_socket *out);

/* The options of every REQ socket a client dials: the frame cap, no
 * resend on a timer, quick reconnects. Returns 0 or an nng error. */
int net_req_options(nng_socket s);

/* The TLS files of a client port (PEM paths; net_tls.c): ca, the CA the
 * other side's certificate must be signed by (a router requires clients
 * to show one); cert and key, this side's certificate and its unencrypted
 * key (required of a router, and of a client the router is to accept);
 * server_name, what a client checks the router's certificate against
 * (NULL: the URL's host). */
typedef struct net_tls {
    const char *ca, *cert, *key, *server_name;
} net_tls;

/* As net_listen, with TLS (tls+tcp:// URLs) when tls is not NULL: clients
 * without a certificate the CA signed get no connection. Returns 0,
 * SX_EINVAL (unreadable or unusable files), SX_ENET, SX_ENOMEM, with the
 * reason in err[errlen] (may be NULL). */
int net_listen_tls(const char *url, const net_tls *tls, nng_socket *out, char *err, size_t errlen);

/* As net_dial, with TLS when tls is not NULL. Returns as net_listen_tls;
 * logs nothing. */
int net_dial_tls(const char *url, const net_tls *tls, nng_socket *out, char *err, size_t errlen);

/* One request/reply on its own context. On success *resp (owned by the
 * caller, free with free()) holds the reply. Returns 0, SX_ETIMEDOUT,
 * SX_EUNAVAIL (peer not reachable), SX_ENET, SX_ENOMEM. Thread-safe. */
int net_call(nng_socket s, const uint8_t *req, size_t n, int timeout_ms, uint8_t **resp,
             size_t *resp_n);

/* Coalesced calls to one server: a net_peer owns max_frames REQ contexts
 * on sock. A call goes out alone on an idle context; while all are busy,
 * calls queue and the next free context sends all queued calls as one
 * MULTI frame (msg.h), whose reply is answered when its slowest call is.
 * Low load pays no delay; high load pays a few hops instead of one each. */
typedef struct net_peer net_peer;

/* The message of the SX_ETOOBIG reply a server puts in a MULTI reply in
 * place of a reply that would not fit the frame; the peer then resends
 * that request alone. */
#define NET_MULTI_UNFIT "reply too large to share a MULTI frame"

/* Requests in one MULTI frame, at most (a server refuses more). */
#define NET_MULTI_MAX 256

/* Frames in flight per net_peer: SHARDEX_BATCH_FRAMES from the
 * environment, else dflt (NET_BATCH_FRAMES_CLIENT in libshardex,
 * NET_BATCH_FRAMES_ROUTER in the router: measured best for each, see
 * docs/PERFORMANCE.md); 0 turns coalescing off, and then peers get
 * NET_PEER_ALONE contexts, so that every call goes alone (still
 * asynchronous: a router fiber waiting on it parks). The environment is
 * read once. */
#define NET_BATCH_FRAMES_CLIENT 2
#define NET_BATCH_FRAMES_ROUTER 1
#define NET_PEER_ALONE 1024
int net_batch_frames(int dflt);

/* Completion of a peer call: err 0 and the reply frame resp..n (borrowed:
 * valid only during the callback), or err an sx_err and resp NULL. Runs on
 * an nng thread, or inside a net_peer_submit* call on the submitting
 * thread: when that call failed at once, or for other calls of the peer
 * whose deadline had passed when that submit sent them out. It must not
 * close its own peer. */
typedef void (*net_done_fn)(void *arg, int err, const uint8_t *resp, size_t n);

/* Opens a peer on REQ socket sock with at most max_frames frames in
 * flight. When calls may still be in flight, close the socket before the
 * peer (nng 1.5 can hang in nng_close when a reply for an already closed
 * context arrives meanwhile) and submit nothing after that. Returns 0,
 * SX_ENOMEM or SX_ENET. */
int net_peer_open(nng_socket sock, int max_frames, net_peer **out);

/* Opens a peer on a link to url (link.h): one connection, dialed in the
 * background and redialed when it drops; every call is its own frame, and
 * calls made while the connection is down wait for it (or their
 * deadline). A call in flight when the connection drops fails with
 * SX_EUNAVAIL (a read goes out again on the next connection, once). A call
 * with net_peer_call.unsent set waits for no connection and is sent at
 * most once (see there). At most max_batches batches of calls are unanswered at
 * once: calls made meanwhile leave together when one is answered in full
 * (as max_frames for REQ; solo calls do not count). Returns 0, SX_EINVAL
 * (bad url) or SX_ENOMEM. */
int net_peer_open_link(const char *url, int max_batches, net_peer **out);

/* Opens a peer whose calls go to server srv of this same process (a
 * router hosted by a storage node, calling that node): each call is
 * dispatched on the calling thread as if srv had received it (a quick
 * request runs there and then, a deferred one is handed over, anything
 * else goes to srv's workers), without a socket, a copy or a frame of
 * its own. done may therefore run inside net_peer_submit*, on the
 * submitting thread, for a success too. Calls are not timed out by the
 * peer (timeout_ms is ignored): srv answers every request it takes, and a
 * write carries its own deadline. A quick request runs on the caller's
 * thread, so a read that waits on the disk holds that thread (a router's
 * fiber thread: its other fibers wait too) until it returns. srv must
 * outlive the peer's calls, and net_peer_close does not wait for them:
 * stop whatever makes them before closing the peer, and before
 * net_server_stop(srv). Returns 0 or SX_ENOMEM. */
typedef struct net_server net_server;
int net_peer_open_local(net_server *srv, net_peer **out);
/* Calls handed to local peer p so far (0 for any other peer). */
uint64_t net_peer_local_calls(net_peer *p);
/* One call through peer p, solo (net_peer_submit_solo), waited for (the
 * calling fiber parks): on success *resp (malloc'd, the caller frees it)
 * holds the reply. Returns 0, SX_ETIMEDOUT, SX_EUNAVAIL, SX_ENET,
 * SX_ENOMEM. */
int net_peer_call_sync(net_peer *p, const uint8_t *req, size_t n, int timeout_ms, uint8_t **resp,
                       size_t *resp_n);

/* For a link's peer: fails every call not answered yet (SX_EUNAVAIL) and
 * refuses new ones, without freeing p (a thread may still be returning
 * from a call on it); net_peer_close frees it later. A REQ socket's peer
 * is left as is (close its socket instead). */
void net_peer_shut(net_peer *p);

/* True for a link's peer whose connection is up (false for a REQ
 * socket's peer: ask nng's statistics). */
bool net_peer_connected(net_peer *p);

/* Starts a call of request frame req..n (which must stay valid until done
 * runs). Returns 0 (done will run exactly once), SX_ENOMEM or SX_EUNAVAIL
 * (closing; done will not run). Thread-safe. timeout_ms (negative: none)
 * runs from here, queueing included: the call fails with SX_ETIMEDOUT once
 * it has passed, or, sharing a frame, once the latest deadline of that
 * frame's calls has. */
int net_peer_submit(net_peer *p, const uint8_t *req, size_t n, int timeout_ms, net_done_fn done,
                    void *arg);

/* net_peer_submit for a call that may take long (a scan page, a strong
 * read's wait): it goes out at once on a context of its own, never shares
 * a frame and never holds up other calls. */
int net_peer_submit_solo(net_peer *p, const uint8_t *req, size_t n, int timeout_ms,
                         net_done_fn done, void *arg);

/* One call of net_peer_submit_n. */
typedef struct net_peer_call {
    const uint8_t *req;
    size_t n;
    net_done_fn done;
    void *arg;
    /* Optional, for a link's peer (NULL: the call waits for a connection,
     * and a read sent on one that drops goes out again on the next). Set:
     * the call never waits for a connection and is never sent twice. It
     * fails with SX_EUNAVAIL at once when no connection is up, and when
     * the one it waits on or was sent on drops; with SX_ETIMEDOUT at its
     * deadline. Before done runs, *unsent says whether it failed without
     * having been sent (it was not run: safe to send anywhere). Other
     * peers ignore it. */
    bool *unsent;
} net_peer_call;

/* Starts n calls at once: queued together, so they leave in as few frames
 * as the limits allow (one when a context is idle). Returns 0 (each done
 * runs exactly once), or SX_ENOMEM / SX_EUNAVAIL / SX_ETOOBIG (a link's
 * call over SX_MAX_FRAME) (none was started). */
int net_peer_submit_n(net_peer *p, const net_peer_call *calls, int n, int timeout_ms);

/* Fails what is queued or in flight (SX_EUNAVAIL or the cancel), waits for
 * the callbacks, frees p. Accepts NULL. */
void net_peer_close(net_peer *p);

/* One call of a fan-out. Fill sock (or peer, which wins when set), req and
 * req_n; net_call_all sets err, resp and resp_n (resp owned by the caller,
 * free()). */
typedef struct net_job {
    nng_socket sock;
    net_peer *peer;
    bool solo; /* with peer: net_peer_submit_solo */
    const uint8_t *req;
    size_t req_n;
    int timeout_ms;   /* > 0: this job's own timeout (else net_call_all's) */
    bool fail_unsent; /* with a link's peer, not solo: net_peer_call.unsent's
                       * rules (no wait for a connection, no second send) */
    int err;
    bool unsent; /* out, with fail_unsent: it failed without being sent */
    uint8_t *resp;
    size_t resp_n;
} net_job;

/* Runs every job concurrently and waits for all, each for at most its
 * timeout_ms, or else timeout_ms, from the call (send and receive
 * together; negative: no limit). Jobs of one peer with the same timeout
 * are submitted together (they may share a frame). Returns 0 if the jobs
 * could be started (look at each job's err), SX_ENOMEM otherwise. */
int net_call_all(net_job *jobs, int n, int timeout_ms);

/* Request handler: decode req..n, append the reply frame to out. Called
 * concurrently from the server's workers. Must never abort on bad input. */
typedef void (*net_handler)(void *arg, const uint8_t *req, size_t n, mp_buf *out);

typedef struct net_server net_server;

/* Serves sock with handler on nworkers threads (and as many receive
 * contexts); MULTI requests are split and their frames run concurrently.
 * Returns 0 or SX_ENOMEM; *out is freed by net_server_stop. */
int net_server_start(nng_socket sock, int nworkers, net_handler h, void *arg, net_server **out);

/* Says whether requests of type t are short and never wait on anything
 * (a local read): such requests run at once on the nng thread that
 * received them (a MULTI's quick frames one after another), not on a
 * worker. */
typedef bool (*net_quick_fn)(msg_type t);

/* A request whose reply was deferred (see net_defer_fn). */
typedef struct net_reply net_reply;

/* Offers request p..n (of type t) to the daemon to answer later, without a
 * worker: called on the nng thread that received it, so it must not block.
 * Returns false to decline (the request then runs on a worker as usual), or
 * true having taken it: the daemon then calls net_reply_send(r, ...) or
 * net_reply_requeue(r) exactly once, from any thread (also from inside this
 * function, before it returns); p..n stays valid until then.
 * net_server_stop waits, without a time limit, until every taken request is
 * answered or handed back: the daemon must keep answering until it
 * returns. */
typedef bool (*net_defer_fn)(void *arg, msg_type t, const uint8_t *p, size_t n, net_reply *r);

/* Called on the nng thread that offered requests to net_defer_fn, once
 * every request of the frame it received (all of a MULTI's) has been
 * offered, when the defer function took at least one of them: a daemon
 * that gathers what it takes sends it from here (and may answer or hand
 * back taken requests from inside it). */
typedef void (*net_defer_flush_fn)(void *arg);

/* Sends the reply of deferred request r: out's bytes are taken (out is left
 * empty). r is gone afterwards. */
void net_reply_send(net_reply *r, mp_buf *out);

/* Hands deferred request r back: it runs on a worker (or fiber) as if it
 * had been declined, and the handler answers it. r is the daemon's no
 * more. Once the server is stopping, r is answered SX_EUNAVAIL at once; one
 * handed back just before may be dropped unanswered by the stop, like any
 * request the server had queued but not started. */
void net_reply_requeue(net_reply *r);

/* How a server runs its requests. */
typedef struct net_server_opts {
    int workers;                    /* threads (at least 1) */
    int fibers;                     /* > 0: each request runs as a fiber (fiber.h), at
                                     * most this many at once, on the worker threads;
                                     * its peer calls park the fiber, not the thread */
    net_quick_fn quick;             /* NULL: no frame is quick */
    net_defer_fn defer;             /* NULL: no request is deferred */
    net_defer_flush_fn defer_flush; /* NULL: none */
    int slots;                      /* receive contexts (each holds its request until
                                     * answered); 0: one per worker, or per fiber */
} net_server_opts;

/* net_server_open with workers threads and a quick predicate. */
int net_server_start_q(nng_socket sock, int nworkers, net_handler h, net_quick_fn quick, void *arg,
                       net_server **out);

/* Stack of each request fiber. */
#define NET_FIBER_STACK (256u * 1024u)

/* Serves sock with handler as o says (as many receive contexts as
 * workers, or as fibers in fiber mode). Returns 0 or SX_ENOMEM; *out is
 * freed by net_server_stop. */
int net_server_open(nng_socket sock, const net_server_opts *o, net_handler h, void *arg,
                    net_server **out);

/* net_server_open for links (link.h) accepted on url instead of a REP
 * socket: a request runs as it would there, its reply goes back on its
 * link with its id. A link's frames are read one after another: quick
 * requests run in order on the thread that read them. Up to
 * NET_LINK_MAX_HELD may be unanswered per link before it stops reading.
 * Returns 0, SX_EINVAL (bad url), SX_ENET (cannot listen there),
 * SX_ENOMEM. */
int net_server_open_link(const char *url, const net_server_opts *o, net_handler h, void *arg,
                         net_server **out);

/* A link server's cap on one link's unanswered requests: past it the link
 * reads no more until half are answered (link.h), as a REP socket's fixed
 * receive contexts bounded what it held. Callers inside the cluster stay
 * far below it (a router's fibers, a shipper's rounds). */
#define NET_LINK_MAX_HELD 1024

/* Runs request frame req..n on srv as if srv had received it, its reply
 * (or SX_EUNAVAIL if srv drops it, stopping) going to done(arg, ...)
 * exactly once, maybe before this returns (net_peer_open_local). req
 * must stay valid until done has run. Returns 0, or SX_EUNAVAIL when srv
 * is stopping (done will not run). */
int net_server_call_local(net_server *srv, const uint8_t *req, size_t n, net_done_fn done,
                          void *arg);
/* Joins the workers, waits for every deferred reply and then (at most
 * NET_STOP_SEND_WAIT_S) for the replies to be sent, closes the socket,
 * frees the server. Accepts NULL. */
#define NET_STOP_SEND_WAIT_S 2
void net_server_stop(net_server *srv);

/* Starts a detached thread that ends the process with _exit(0) if it is
 * still running seconds from now. Daemons call it when asked to stop:
 * nng 1.5.2 can hang forever in nng_close (its issue #1543), and a stop
 * must not hang; nothing is lost, since every acknowledged write is synced
 * before its acknowledgement. */
#define NET_SHUTDOWN_GRACE_S 8
void net_shutdown_guard(int seconds);

#endif
