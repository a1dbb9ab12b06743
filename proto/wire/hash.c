/*
 * hash.c — keyed shard hash (SipHash-2-4 via libsodium) and byte-order helpers.
 */
#include <sodium.h>
#include "hash.h"
#include "sx_errors.h"

int proto_init(void)
{
    return sodium_init() < 0 ? SX_EINTERNAL : 0;
}

uint64_t hash_shard(const uint8_t key[SX_HASH_KEY_BYTES], const void *p, size_t n)
{
    unsigned char out[crypto_shorthash_BYTES];
    uint64_t h = 0;

    crypto_shorthash(out, p, n, key);
    for (int i = crypto_shorthash_BYTES - 1; i >= 0; i--)
        h = (h << 8) | out[i];
    return h;
}

void be_put64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
}

uint64_t hash_fnv64(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h = 1469598103934665603ull;

    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

uint64_t be_get64(const uint8_t *p)
{
    uint64_t v = 0;

    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return v;
}

void be_put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

uint32_t be_get32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
