/*
 * tuple.h — the order-preserving key encoding shared by every shardex key.
 *
 * A tuple is a concatenation of components, each a type tag followed by its
 * bytes, such that bytewise comparison of two encodings equals comparison of
 * the tuples (first by type tag, then by value), and no two different tuples
 * encode alike. See proto/PROTOCOL.md, "Key encoding".
 *
 *   tag  type     bytes
 *   0x01 null     —
 *   0x02 false    —
 *   0x03 true     —
 *   0x10 int64    8 bytes big-endian, sign bit flipped
 *   0x20 double   8 bytes: IEEE bits, all flipped if negative, else sign flipped
 *   0x30 string   UTF-8 bytes, 0x00 escaped as 0x00 0xFF, then 0x00
 *   0x40 binary   bytes, 0x00 escaped as 0x00 0xFF, then 0x00
 *
 * Key-able values are scalars; lists and maps cannot be key components.
 */
#ifndef SX_TUPLE_H
#define SX_TUPLE_H

#include "mp.h"

#define TUP_NULL 0x01
#define TUP_FALSE 0x02
#define TUP_TRUE 0x03
#define TUP_INT 0x10
#define TUP_DOUBLE 0x20
#define TUP_STR 0x30
#define TUP_BIN 0x40

/* Longest encoded key component tuple accepted anywhere (values + primary key). */
#define SX_MAX_KEY 1024

/* A simple growable byte string used to build keys. */
typedef struct tup_bytes {
    uint8_t *p;
    size_t n, cap;
} tup_bytes;

/* Appends n bytes; returns 0 or SX_ENOMEM. */
int tup_bytes_append(tup_bytes *b, const void *p, size_t n);
/* Frees the bytes (accepts a zeroed struct). */
void tup_bytes_free(tup_bytes *b);

/* Appends the encoding of the msgpack scalar at *c (consumed) to key.
 * Returns 0, SX_EKEY (not a key-able scalar), SX_EPROTO, or SX_ENOMEM. */
int tup_encode_mp(tup_bytes *key, mp_cur *c);

/* Typed encoders appending one component. Return 0 or SX_ENOMEM. */
int tup_encode_null(tup_bytes *key);
int tup_encode_bool(tup_bytes *key, bool v);
int tup_encode_int(tup_bytes *key, int64_t v);
int tup_encode_double(tup_bytes *key, double v);
int tup_encode_str(tup_bytes *key, const void *p, size_t n);
int tup_encode_bin(tup_bytes *key, const void *p, size_t n);
/* Appends a string component without its terminator: the byte prefix shared
 * by every string component that starts with p. */
int tup_encode_str_prefix(tup_bytes *key, const void *p, size_t n);

/* Returns the length of the component starting at p (within n bytes), or 0
 * if it is malformed or truncated. */
size_t tup_component_len(const uint8_t *p, size_t n);

/* Splits off the first k components: on success *head_len is their total
 * length. Returns 0 or SX_EPROTO. */
int tup_split(const uint8_t *p, size_t n, unsigned k, size_t *head_len);

/* Appends the msgpack form of one component (decoding it) to out.
 * Returns the component length consumed, or 0 if malformed. */
size_t tup_decode_to_mp(const uint8_t *p, size_t n, mp_buf *out);

/* Turns key into the smallest byte string greater than every string that
 * starts with key (FoundationDB's strinc): drops trailing 0xFF bytes then
 * increments the last byte. Returns 0, or SX_EINVAL when key is empty or
 * all 0xFF (no upper bound exists; callers treat that as "to the end"). */
int tup_strinc(tup_bytes *key);

/* memcmp-style comparison of two byte strings, shorter-is-smaller on a tie. */
int tup_keycmp(const uint8_t *a, size_t an, const uint8_t *b, size_t bn);

#endif
