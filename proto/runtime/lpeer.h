/*
 * lpeer.h — the net_peer of a link (proto/runtime/link.h): calls to one server over
 * one connection, each frame tagged with its call's id, the connection
 * redialled in the background when it drops. peer.c hands a link peer's
 * calls here; the contract is net.h's (net_peer_*).
 */
#ifndef SX_LPEER_H
#define SX_LPEER_H

#include <stdbool.h>
#include "net.h"

typedef struct lpeer lpeer;

/* A peer dialing url in the background (the server may come up later),
 * with at most max_batches batches of calls unanswered (lpeer.c). Returns
 * 0, SX_EINVAL (bad url) or SX_ENOMEM. */
int lpeer_open(const char *url, int max_batches, lpeer **out);

/* Starts calls[0..n) (sent together): as net_peer_submit_n, or, solo,
 * as net_peer_submit_solo. */
int lpeer_submit_n(lpeer *p, const net_peer_call *calls, int n, int timeout_ms, bool solo);

/* True while the connection is up. */
bool lpeer_connected(lpeer *p);

/* Fails every call not answered (SX_EUNAVAIL), refuses new ones, stops
 * dialing and closes the connection; p stays allocated. Idempotent. */
void lpeer_shut(lpeer *p);

/* lpeer_shut, then waits for every callback and frees p. Accepts NULL. */
void lpeer_close(lpeer *p);

#endif
