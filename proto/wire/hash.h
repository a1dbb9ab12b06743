/*
 * hash.h — the keyed shard hash.
 *
 * h = SipHash-2-4 (libsodium crypto_shorthash) of the encoded partition-key
 * component, keyed by the cluster's secret hash key (16 bytes, made when the
 * cluster is created), read as a little-endian uint64. Fact partitions own
 * contiguous ranges of h.
 *
 * Also the unkeyed FNV-1a hash for in-memory tables, and big-endian
 * integer helpers.
 */
#ifndef SX_HASH_H
#define SX_HASH_H

#include <stdint.h>
#include <stddef.h>

#define SX_HASH_KEY_BYTES 16

/* Returns the shard hash of the encoded partition key p..n. Requires that
 * sodium_init() succeeded (proto_init does it). Thread-safe. */
uint64_t hash_shard(const uint8_t key[SX_HASH_KEY_BYTES], const void *p, size_t n);

/* FNV-1a (64-bit) of p..n: for in-memory hash tables of keys that come
 * from the store, never as a shard hash (it is not keyed). Pure. */
uint64_t hash_fnv64(const void *p, size_t n);

/* Initialises libsodium; returns 0 or SX_EINTERNAL. Idempotent. */
int proto_init(void);

/* Stores v big-endian into 8 bytes / loads it back. */
void be_put64(uint8_t *p, uint64_t v);
uint64_t be_get64(const uint8_t *p);
void be_put32(uint8_t *p, uint32_t v);
uint32_t be_get32(const uint8_t *p);

#endif
