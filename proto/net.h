/*
 * net.h — nng plumbing shared by every process: sockets with a maximum
 * message size, request/reply calls with timeouts, parallel fan-out, and a
 * multi-worker server loop over REP contexts.
 */
#ifndef SX_NET_H
#define SX_NET_H

#include <stdint.h>
#include <stddef.h>
#include <nng/nng.h>
#include "mp.h"

#define SX_MAX_FRAME (16u * 1024u * 1024u)  /* NNG_OPT_RECVMAXSZ on every socket */
#define SX_CALL_TIMEOUT_MS 10000

/* Maps an nng error to an sx_err: 0 stays 0; timeouts SX_ETIMEDOUT;
 * out of memory SX_ENOMEM; closed, refused or broken connections
 * SX_EUNAVAIL; anything else SX_ENET. */
int net_map_nng(int rv);

/* Opens a REP socket listening on url. Returns 0, SX_ENET (bad or busy url). */
int net_listen(const char *url, nng_socket *out);

/* Opens a REQ socket dialing url in the background (the peer may come up
 * later). Returns 0 or SX_ENET. */
int net_dial(const char *url, nng_socket *out);

/* One request/reply on its own context. On success *resp (owned by the
 * caller, free with free()) holds the reply. Returns 0, SX_ETIMEDOUT,
 * SX_EUNAVAIL (peer not reachable), SX_ENET, SX_ENOMEM. Thread-safe. */
int net_call(nng_socket s, const uint8_t *req, size_t n, int timeout_ms,
             uint8_t **resp, size_t *resp_n);

/* One call of a fan-out. Fill sock/req/req_n; net_call_all sets err,
 * resp and resp_n (resp owned by the caller, free()). */
typedef struct net_job {
    nng_socket sock;
    const uint8_t *req;
    size_t req_n;
    int err;
    uint8_t *resp;
    size_t resp_n;
} net_job;

/* Runs every job concurrently and waits for all. Returns 0 if the jobs
 * could be started (look at each job's err), SX_ENOMEM otherwise. */
int net_call_all(net_job *jobs, int n, int timeout_ms);

/* Request handler: decode req..n, append the reply frame to out. Called
 * concurrently from the server's workers. Must never abort on bad input. */
typedef void (*net_handler)(void *arg, const uint8_t *req, size_t n, mp_buf *out);

typedef struct net_server net_server;

/* Starts nworkers threads serving sock with handler. Returns 0 or
 * SX_ENOMEM/SX_ENET; *out is freed by net_server_stop. */
int net_server_start(nng_socket sock, int nworkers, net_handler h, void *arg,
                     net_server **out);

/* Closes the socket, joins the workers, frees the server. Accepts NULL. */
void net_server_stop(net_server *srv);

#endif
