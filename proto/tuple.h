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

#define TUP_NULL   0x01
#define TUP_FALSE  0x02
#define TUP_TRUE   0x03
#define TUP_INT    0x10
#define TUP_DOUBLE 0x20
#define TUP_STR    0x30
#define TUP_BIN    0x40

/* Longest encoded key component tuple accepted anywhere (values + primary key). */
#define SX_MAX_KEY 1024

