/*
 * rawlink.c — links spoken by hand on a plain TCP socket (see rawlink.h):
 * the frame layout, the hello, the per-direction keys and the tags, each
 * written from proto/PROTOCOL.md's description.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sodium.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "rawlink.h"

#define HELLO 36
#define TAG 16

static uint8_t g_key[32]; /* bound to the cluster (rawlink_set_key) */
static bool g_keyed;

int raw_connect(const char *url)
{
    char host[64];
    unsigned port;
    struct sockaddr_in sa;
    struct timeval tv = { RAW_TIMEOUT_S, 0 };
    int one = 1;

    if (sscanf(url, "tcp://%63[^:]:%u", host, &port) != 2 || port > 65535)
        return -1;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return -1;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int read_full(int fd, uint8_t *p, size_t n)
{
    while (n) {
        ssize_t r = recv(fd, p, n, 0);
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static int send_full(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int rawlink_set_key(const char *hex, const char *cluster)
{
    uint8_t link_key[32];
    size_t got = 0;
    crypto_generichash_state st;

    if (sodium_init() < 0 || hex == NULL || strlen(hex) != 64 ||
        sodium_hex2bin(link_key, sizeof link_key, hex, 64, NULL, &got, NULL) != 0 || got != 32)
        return -1;
    /* K = BLAKE2b-256(key = link_key, "sx-link-v1\0" || cluster) */
    crypto_generichash_init(&st, link_key, sizeof link_key, sizeof g_key);
    crypto_generichash_update(&st, (const uint8_t *)"sx-link-v1", 11);
    crypto_generichash_update(&st, (const uint8_t *)cluster, strlen(cluster));
    crypto_generichash_final(&st, g_key, sizeof g_key);
    g_keyed = true;
    return 0;
}

bool rawlink_keyed(void)
{
    return g_keyed;
}

/* BLAKE2b-256 keyed with K over a 4-byte label ("d2l\0" or "l2d\0"),
 * the dialer's nonce, the listener's, BLAKE2b-256 of the URL dialed. */
static void derive(uint8_t out[32], const char *label, const uint8_t *nd, const uint8_t *nl,
                   const char *url)
{
    uint8_t msg[4 + 32 + 32 + 32];

    memcpy(msg, label, 4);
    memcpy(msg + 4, nd, 32);
    memcpy(msg + 36, nl, 32);
    crypto_generichash(msg + 68, 32, (const uint8_t *)url, strlen(url), NULL, 0);
    crypto_generichash(out, 32, msg, sizeof msg, g_key, sizeof g_key);
}

int rawlink_open(rawlink *l, const char *url)
{
    uint8_t mine[HELLO], theirs[HELLO];

    memset(l, 0, sizeof *l);
    l->fd = raw_connect(url);
    if (l->fd < 0)
        return -1;
    l->keyed = g_keyed;
    if (!l->keyed)
        return 0;
    memcpy(mine, "SXL1", 4);
    randombytes_buf(mine + 4, 32);
    if (send_full(l->fd, mine, HELLO) != 0 || read_full(l->fd, theirs, HELLO) != 0 ||
        memcmp(theirs, "SXL1", 4) != 0) {
        rawlink_close(l);
        return -1;
    }
    derive(l->ktx, "d2l", mine + 4, theirs + 4, url);
    derive(l->krx, "l2d", mine + 4, theirs + 4, url);
    if (rawlink_send(l, 0, NULL, 0, false) != 0) { /* the proof */
        rawlink_close(l);
        return -1;
    }
    return 0;
}

/* The AEAD nonce of a sequence number: 4 zero bytes, then it, big-endian. */
static void seq_nonce(uint8_t npub[12], uint64_t seq)
{
    memset(npub, 0, 4);
    for (int i = 0; i < 8; i++)
        npub[4 + i] = (uint8_t)(seq >> (56 - 8 * i));
}

int rawlink_send(rawlink *l, uint64_t id, const uint8_t *p, size_t n, bool bad_tag)
{
    size_t all = 12 + n + (l->keyed ? TAG : 0);
    uint8_t *b = malloc(all), npub[12], none[1] = { 0 };
    unsigned long long taglen;

    if (b == NULL)
        return -1;
    for (int i = 0; i < 4; i++)
        b[i] = (uint8_t)((8 + n) >> (24 - 8 * i));
    for (int i = 0; i < 8; i++)
        b[4 + i] = (uint8_t)(id >> (56 - 8 * i));
    if (n)
        memcpy(b + 12, p, n);
    if (l->keyed) {
        seq_nonce(npub, l->txseq++);
        crypto_aead_chacha20poly1305_ietf_encrypt_detached(none, b + 12 + n, &taglen, none, 0, b,
                                                           12 + n, NULL, npub, l->ktx);
        if (bad_tag)
            b[12 + n] ^= 1;
    }
    int rc = send_full(l->fd, b, all);
    free(b);
    return rc;
}

int rawlink_recv(rawlink *l, uint64_t *id, uint8_t **p, size_t *n)
{
    uint8_t hdr[12], tag[TAG], npub[12], none[1] = { 0 };

    *p = NULL;
    if (read_full(l->fd, hdr, sizeof hdr) != 0)
        return -1;
    uint32_t len = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 | (uint32_t)hdr[2] << 8 | hdr[3];
    if (len < 8 || len > 8u + 16u * 1024u * 1024u)
        return -2;
    uint8_t *b = malloc(4 + (size_t)len);
    if (b == NULL)
        return -1;
    memcpy(b, hdr, sizeof hdr);
    if (read_full(l->fd, b + 12, len - 8) != 0 || (l->keyed && read_full(l->fd, tag, TAG) != 0)) {
        free(b);
        return -1;
    }
    if (l->keyed) {
        seq_nonce(npub, l->rxseq++);
        if (crypto_aead_chacha20poly1305_ietf_decrypt_detached(
                none, NULL, none, 0, tag, b, 4 + (size_t)len, npub, l->krx) != 0) {
            free(b);
            return -2;
        }
    }
    *id = 0;
    for (int i = 0; i < 8; i++)
        *id = *id << 8 | b[4 + i];
    *n = len - 8;
    memmove(b, b + 12, *n);
    *p = b;
    return 0;
}

void rawlink_close(rawlink *l)
{
    if (l->fd >= 0)
        close(l->fd);
    l->fd = -1;
}
