/*
 * link.h — framed, multiplexed request/reply connections over nng byte
 * streams (nng_stream: tcp://, ipc:// or tls+tcp:// as the URL says),
 * without nng's scalability-protocol layers.
 *
 * Why: on this project's hosts one nng REQ/REP round trip over loopback
 * costs ~120 µs and ~140 µs of CPU (both ends), of which about half is the
 * SP layers handing each message between nng's threads (the TCP pipe, then
 * the protocol, then the caller's aio); the same round trip over the
 * stream under them costs ~60 µs and ~72 µs of CPU (docs/PERFORMANCE.md).
 * A link reads whatever the socket holds in one receive and
 * runs the frames found in it on that nng thread, and writes every frame
 * queued while a send was in flight in the next send.
 *
 * Wire (proto/PROTOCOL.md, "Transport"): each frame is a u32 big-endian length
 * L of what follows (8 ≤ L ≤ 8 + SX_MAX_FRAME), a u64 big-endian id, then
 * L − 8 bytes of payload (a msgpack frame). A reply carries its request's
 * id. A frame whose length is out of bounds closes the link.
 *
 * Authentication (proto/runtime/link_auth.h): with a link key set
 * (link_auth_set_key: the config's "link_key"), each side first sends a
 * hello and every frame carries a 16-byte tag after its payload, the
 * dialer's first being an empty proof; a link whose peer sends no hello,
 * or no proof first, or a frame whose tag fails, is closed before the
 * frame is handed over, and frames sent before the peer's hello came wait
 * for it. Callers see the same frames either way.
 *
 * Threads: frame callbacks run on an nng thread, one at a time per link,
 * in the order received. link_send may be called from any thread.
 */
#ifndef SX_LINK_H
#define SX_LINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <nng/nng.h>

typedef struct link_conn link_conn;
typedef struct link_listener link_listener;

/* Bytes of a frame's header: length and id. */
#define LINK_HDR 12u

/* A whole frame received on l: frame..n (malloc'd) becomes the callee's to
 * free. more is true when another whole frame of the same receive follows
 * at once (frames sent together mostly arrive together: a server may
 * gather a burst's requests and act on them at its last). Runs on an nng
 * thread; the link reads on once it returns. */
typedef void (*link_frame_fn)(void *arg, link_conn *l, uint64_t id, uint8_t *frame, size_t n,
                              bool more);

/* l is closed (either side, an error, or link_close): runs exactly once,
 * after l's last frame callback, with err 0 (closed here) or an sx_err.
 * link_send fails from then on. The link itself lives until its last
 * reference is dropped (link_unref). */
typedef void (*link_closed_fn)(void *arg, link_conn *l, int err);

/* Queues frame (id, p..n) on l; bytes are copied. Returns 0, SX_ENOMEM,
 * SX_ETOOBIG (n > SX_MAX_FRAME) or SX_EUNAVAIL (closed or closing). */
int link_send(link_conn *l, uint64_t id, const uint8_t *p, size_t n);

/* One frame of link_sendv. */
typedef struct link_out {
    uint64_t id;
    const uint8_t *p;
    size_t n;
} link_out;

/* Queues frames v[0..n) on l in order, in one go (they leave together
 * unless a write is in flight). Returns as link_send; on error none is
 * queued. */
int link_sendv(link_conn *l, const link_out *v, int n);

/* Closes l (idempotent); its closed callback follows, on this thread or
 * an nng thread. */
void link_close(link_conn *l);

/* Takes / drops a reference. A link holds one of its own until its closed
 * callback has returned; link_dial gives the caller another. So an
 * accepted link lives until it closes, and longer only while referenced
 * (say, by a reply still to send: link_send on a closed link fails
 * cleanly). The last drop frees it; safe from any thread, callbacks
 * included. */
void link_ref(link_conn *l);
void link_unref(link_conn *l);

/* Dials url and waits at most timeout_ms for the connection (the link is
 * authenticated with the key set now, if any, as is link_wrap's). On success
 * *out is a link (one reference the caller's) whose frames go to on_frame
 * and whose close goes to on_closed. Returns 0, SX_EUNAVAIL (refused or unreachable),
 * SX_ETIMEDOUT, SX_EINVAL (bad url), SX_ENOMEM. */
int link_dial(const char *url, int timeout_ms, link_frame_fn on_frame, link_closed_fn on_closed,
              void *arg, link_conn **out);

/* A link on stream s, a connection this side dialed to url (taken, freed
 * on failure too; url is what the peer listens on: an authenticated
 * link's keys cover it), with one reference the caller's; as link_dial.
 * Returns 0 or SX_ENOMEM. */
int link_wrap(nng_stream *s, const char *url, link_frame_fn on_frame, link_closed_fn on_closed,
              void *arg, link_conn **out);

/* Listens on url; every accepted connection becomes a link served by
 * on_frame / on_closed, authenticated with the key set now, if any. max_held
 * > 0 caps each link's held requests (link_hold): at the cap the link stops
 * reading until they are down to half; 0: no cap. Returns 0, SX_EINVAL (bad
 * url), SX_ENET (address busy or not listenable), SX_ENOMEM. */
int link_listen(const char *url, link_frame_fn on_frame, link_closed_fn on_closed, void *arg,
                int max_held, link_listener **out);

/* A server took a request from l that it has not answered yet (hold), or
 * has answered or dropped one (release): the count behind max_held. Any
 * thread. */
void link_hold(link_conn *l);
void link_release(link_conn *l);

/* False while l has stopped reading at its cap of held requests. */
bool link_reading(link_conn *l);

/* Waits at most timeout_ms until no accepted link has bytes left to
 * write; true if none has. */
bool link_listener_drain(link_listener *ls, int timeout_ms);

/* Stops accepting, closes every accepted link, waits for their closed
 * callbacks, frees ls. Not from a link callback. Accepts NULL. */
void link_listener_close(link_listener *ls);

#endif
