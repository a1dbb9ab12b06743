/*
 * link_auth.c — hellos, per-direction keys and frame tags of authenticated
 * links (see link_auth.h for the scheme and proto/PROTOCOL.md, "Links").
 */
#include <stdlib.h>
#include <string.h>
#include <sodium.h>

#include "link_auth.h"
#include "hash.h"
#include "sx_errors.h"

#define NONCE_BYTES (LINK_HELLO - 4u)
_Static_assert(LINK_TAG == crypto_aead_chacha20poly1305_ietf_ABYTES, "a tag is the AEAD's");

struct link_auth {
    bool dialer;
    uint8_t key[LINK_KEY_BYTES];
    uint8_t where[32]; /* BLAKE2b-256 of the listener's URL */
    uint8_t mine[NONCE_BYTES];
    uint8_t ktx[crypto_aead_chacha20poly1305_ietf_KEYBYTES];
    uint8_t krx[crypto_aead_chacha20poly1305_ietf_KEYBYTES];
    uint64_t tx_seq, rx_seq;
};

static uint8_t g_key[LINK_KEY_BYTES];
static bool g_keyed;

void link_auth_set_key(const uint8_t *link_key, const char *cluster)
{
    static const char label[] = "sx-link-v1"; /* with its NUL */
    crypto_generichash_state st;

    g_keyed = link_key != NULL;
    if (link_key == NULL) {
        sodium_memzero(g_key, sizeof g_key);
        return;
    }
    crypto_generichash_init(&st, link_key, LINK_KEY_BYTES, sizeof g_key);
    crypto_generichash_update(&st, (const uint8_t *)label, sizeof label);
    crypto_generichash_update(&st, (const uint8_t *)cluster, strlen(cluster));
    crypto_generichash_final(&st, g_key, sizeof g_key);
}

bool link_auth_enabled(void)
{
    return g_keyed;
}

bool link_auth_key(uint8_t *key)
{
    if (g_keyed)
        memcpy(key, g_key, LINK_KEY_BYTES);
    return g_keyed;
}

link_auth *la_new(const uint8_t *key, bool dialer, const char *url, uint8_t hello[LINK_HELLO],
                  int *err)
{
    *err = 0;
    if (key == NULL)
        return NULL;
    link_auth *a = calloc(1, sizeof *a);
    if (a == NULL) {
        *err = SX_ENOMEM;
        return NULL;
    }
    a->dialer = dialer;
    memcpy(a->key, key, LINK_KEY_BYTES);
    crypto_generichash(a->where, sizeof a->where, (const uint8_t *)url, strlen(url), NULL, 0);
    randombytes_buf(a->mine, sizeof a->mine);
    memcpy(hello, LINK_MAGIC, 4);
    memcpy(hello + 4, a->mine, NONCE_BYTES);
    return a;
}

void la_free(link_auth *a)
{
    if (a == NULL)
        return;
    sodium_memzero(a, sizeof *a);
    free(a);
}

/* out = BLAKE2b-256 keyed with the link key over label, the dialer's
 * nonce, the listener's, then the hash of the listener's URL. */
static void derive(const link_auth *a, uint8_t *out, const char *label, const uint8_t *nd,
                   const uint8_t *nl)
{
    crypto_generichash_state st;

    crypto_generichash_init(&st, a->key, sizeof a->key, crypto_aead_chacha20poly1305_ietf_KEYBYTES);
    crypto_generichash_update(&st, (const uint8_t *)label, 4);
    crypto_generichash_update(&st, nd, NONCE_BYTES);
    crypto_generichash_update(&st, nl, NONCE_BYTES);
    crypto_generichash_update(&st, a->where, sizeof a->where);
    crypto_generichash_final(&st, out, crypto_aead_chacha20poly1305_ietf_KEYBYTES);
}

int la_hello(link_auth *a, const uint8_t *hello)
{
    if (memcmp(hello, LINK_MAGIC, 4) != 0)
        return SX_EPROTO;
    const uint8_t *theirs = hello + 4;
    const uint8_t *nd = a->dialer ? a->mine : theirs, *nl = a->dialer ? theirs : a->mine;

    derive(a, a->dialer ? a->ktx : a->krx, "d2l", nd, nl); /* "d2l\0": 4 bytes */
    derive(a, a->dialer ? a->krx : a->ktx, "l2d", nd, nl);
    return 0;
}

/* The AEAD nonce of sequence number seq: 4 zero bytes, then seq. */
static void seq_nonce(uint8_t *npub, uint64_t seq)
{
    memset(npub, 0, 4);
    be_put64(npub + 4, seq);
}

void la_seal(link_auth *a, const uint8_t *p, size_t n, uint8_t *tag)
{
    uint8_t npub[crypto_aead_chacha20poly1305_ietf_NPUBBYTES], none[1] = { 0 };
    unsigned long long taglen = 0;

    seq_nonce(npub, a->tx_seq++);
    crypto_aead_chacha20poly1305_ietf_encrypt_detached(none, tag, &taglen, none, 0, p, n, NULL,
                                                       npub, a->ktx);
}

int la_open(link_auth *a, const uint8_t *p, size_t n, const uint8_t *tag)
{
    uint8_t npub[crypto_aead_chacha20poly1305_ietf_NPUBBYTES], none[1] = { 0 };

    seq_nonce(npub, a->rx_seq++);
    return crypto_aead_chacha20poly1305_ietf_decrypt_detached(none, NULL, none, 0, tag, p, n, npub,
                                                              a->krx) == 0
               ? 0
               : SX_EPROTO;
}
