/*
 * data.h — the benchmark's customers data set, a pure function of the item
 * id and the seed, shared by shardex-bench (items) and the PostgreSQL
 * loader (CSV) so every system holds the same rows.
 *
 * Item id i of a data set of n items (n a multiple of 1000):
 *   pair p = i % (n / 10), town = T(p / 100), lastname = L(p % 100),
 *   so every (town, lastname) pair holds exactly 10 items;
 *   T(t) = letter 'A' + t % 26 followed by t in 5 digits ("B00001"),
 *   L(l) = letter 'A' + l % 26 followed by l in 5 digits ("Q00042");
 *   payload = 100 printable characters from a seeded generator.
 * Towns and last names start with every letter, so the entries of an index
 * on either straddle the index partitions' split point "M" and every index
 * is spread over both index nodes.
 */
#ifndef SX_BENCH_DATA_H
#define SX_BENCH_DATA_H

#include <stdint.h>
#include <stdio.h>
#include "shardex.h"

#define DATA_PAYLOAD 100
#define DATA_PER_PAIR 10
#define DATA_NAMES 100

/* Town and last name of the pair p into t[16] and l[16]. */
void data_pair(uint64_t p, char *t, char *l);
/* Town of pair p and a last name outside the data set (L(p % 100) then
 * "w", e.g. "Q00042w") into t[16] and l[16]: what new items get (W1, W7's
 * background load). */
void data_fresh_pair(uint64_t p, char *t, char *l);
/* Number of pairs in a data set of n items. */
uint64_t data_npairs(uint64_t n);
/* Payload of item id under seed into out[DATA_PAYLOAD + 1]. */
void data_payload(uint64_t seed, uint64_t id, char *out);
/* A new item {id, town, lastname, payload} for item id of the n-item data
 * set, or NULL when out of memory. Caller frees (sx_item_free). */
sx_item *data_item(uint64_t seed, uint64_t n, uint64_t id);
/* An item with explicit town and last name (writes outside the data set). */
sx_item *data_item_with(uint64_t seed, uint64_t id, const char *town, const char *last);
/* Writes the n-item data set as CSV lines "id,town,lastname,payload". */
int data_csv(FILE *f, uint64_t seed, uint64_t n);
/* xorshift64* step. */
uint64_t rng_next(uint64_t *s);

#endif
