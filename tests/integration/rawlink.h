/*
 * rawlink.h — links (proto/PROTOCOL.md, "Links") spoken by hand on a plain
 * TCP socket, for sx-badframe: it deliberately does not use proto/, so
 * that the wire as documented is what is checked. With a link key set
 * (the cluster's "link_key") a connection starts with the hello exchange
 * and the dialer's proof, and every frame carries its tag, computed here
 * from the page's description with libsodium.
 */
#ifndef SX_RAWLINK_H
#define SX_RAWLINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RAW_TIMEOUT_S 10

/* A TCP connection to url ("tcp://A.B.C.D:PORT"), with RAW_TIMEOUT_S
 * receive and send timeouts and no Nagle delay; the descriptor, or -1.
 * (sx-fuzzframe's links connect with it too.) */
int raw_connect(const char *url);

/* Reads exactly n bytes; 0, or -1 on end of stream, error or timeout. */
int read_full(int fd, uint8_t *p, size_t n);

/* Sets the link key from 64 hex digits and the cluster's name; 0, or -1
 * when hex is not that. */
int rawlink_set_key(const char *hex, const char *cluster);

/* True once a key is set. */
bool rawlink_keyed(void);

typedef struct rawlink {
    int fd;
    bool keyed;
    uint8_t ktx[32], krx[32];
    uint64_t txseq, rxseq;
} rawlink;

/* Connects to url and, with a key set, exchanges hellos and sends the
 * proof. 0, or -1 (no connection, or no hello back: the descriptor is
 * closed). */
int rawlink_open(rawlink *l, const char *url);

/* Sends one frame (id, p..n), with its tag when keyed; bad_tag sends a
 * tag that cannot hold. 0, or -1 when the socket refused. */
int rawlink_send(rawlink *l, uint64_t id, const uint8_t *p, size_t n, bool bad_tag);

/* Receives one frame: *p (malloc'd, *n bytes) and *id. 0; -1 when the
 * connection closed or timed out; -2 when the frame is malformed or its
 * tag fails. */
int rawlink_recv(rawlink *l, uint64_t *id, uint8_t **p, size_t *n);

/* Closes l's connection. */
void rawlink_close(rawlink *l);

#endif
