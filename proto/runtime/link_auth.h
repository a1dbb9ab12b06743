/*
 * link_auth.h — authentication of links (proto/runtime/link.h) between the
 * processes of one cluster, with the cluster's link key (config
 * "link_key", 32 secret bytes every process holds).
 *
 * The key a process uses is bound to its cluster: K = BLAKE2b-256 keyed
 * with link_key over "sx-link-v1\0" and the cluster's name (two clusters
 * that share a link_key still do not talk). Each side of a new connection
 * first sends a hello: the 4 bytes "SXL1" and 32 random bytes (its nonce).
 * From the two nonces, K and the URL the listener listens on (the one the
 * dialer dialed: a connection redirected to another node fails) each side
 * derives two keys, one per direction. Every frame is then followed by a
 * 16-byte tag: ChaCha20-Poly1305 (IETF) over the frame's length, id and
 * payload as additional data, with no ciphertext, the direction's key, and
 * the frame's sequence number in that direction (0, 1, 2 ...) as the
 * nonce. The dialer's first frame is an empty proof (length 8, id 0),
 * which the listener requires before it takes any other: a stranger never
 * gets a frame of its choosing buffered. So a frame is accepted only from
 * a holder of the key, unaltered, once, in its place, on its own
 * connection: a replayed, reordered, reflected or spliced frame fails its
 * tag. Frames are authenticated, not encrypted.
 *
 * Why not TLS: nng's tls+tcp needs certificates on every host and nng
 * built with mbedTLS; the design asks for authentication with a shared
 * secret, which libsodium gives in a few lines (DESIGN.md, "Security").
 */
#ifndef SX_LINK_AUTH_H
#define SX_LINK_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LINK_KEY_BYTES 32u
#define LINK_TAG 16u   /* bytes of a frame's tag */
#define LINK_HELLO 36u /* bytes of a hello: magic and nonce */
#define LINK_MAGIC "SXL1"

typedef struct link_auth link_auth;

/* Sets this process's link key from link_key (LINK_KEY_BYTES bytes) and
 * the cluster's name, or with link_key NULL, none: links dialed and
 * listeners opened afterwards are authenticated with it (both ends must
 * agree). Call at start-up, once the config is read, before making links
 * (not thread-safe against them). Needs proto_init. */
void link_auth_set_key(const uint8_t *link_key, const char *cluster);

/* Copies the key set (bound to the cluster) into key[LINK_KEY_BYTES];
 * false when none is. */
bool link_auth_key(uint8_t *key);

/* True when a key is set: this process's links are authenticated (what
 * `status` reports as links_authenticated). */
bool link_auth_enabled(void);

/* A new connection's authentication state with key (LINK_KEY_BYTES, as
 * link_auth_key gives it; copied) on the listener's url, with this side's
 * hello in hello[LINK_HELLO] to send first; NULL when key is NULL (the
 * link is not authenticated) and, with *err = SX_ENOMEM, when out of
 * memory. dialer: this side dialed (the two sides' keys differ by
 * direction; the dialer's first frame is the proof, la_proof). */
link_auth *la_new(const uint8_t *key, bool dialer, const char *url, uint8_t hello[LINK_HELLO],
                  int *err);

/* Frees a; accepts NULL. */
void la_free(link_auth *a);

/* Takes the peer's hello (LINK_HELLO bytes) and derives the keys.
 * Returns 0, or SX_EPROTO when it is not a hello. */
int la_hello(link_auth *a, const uint8_t *hello);

/* Writes into tag[LINK_TAG] the tag of the next frame sent, p..n (its
 * length, id and payload). Only after la_hello. */
void la_seal(link_auth *a, const uint8_t *p, size_t n, uint8_t *tag);

/* Checks the tag of the next frame received, p..n; returns 0 when it
 * holds, SX_EPROTO when not. Only after la_hello. */
int la_open(link_auth *a, const uint8_t *p, size_t n, const uint8_t *tag);

#endif
